import os, subprocess, shutil, sys
for r in range(3):
    for name in sys.argv[1:]:
        d='/tmp/peak10m'; shutil.rmtree(d, ignore_errors=True); os.makedirs(d)
        cmd=[name,'--mode','aggregate','--keys','10000000','--rows',str(100_000_000+100_000*20),'--rows-per-second','100000',
             '--throttle-after-rows','100000000','--parallelism','2','--state',d+'/state','--out',d+'/out','--checkpoint-interval','1s','--incremental']
        p=subprocess.Popen(cmd,stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
        _,st,ru=os.wait4(p.pid,0)
        print(f"round {r+1} {os.path.basename(name)}: peak {ru.ru_maxrss/1024:.0f} MiB, cpu {ru.ru_utime+ru.ru_stime:.2f} s, status {st}",flush=True)
