import os, subprocess, shutil, sys, time, json
# usage: rsstrace.py BIN [extra args...]; prints RSS timeline (MiB) every 0.5 s and the peak's time
b=sys.argv[1]; extra=sys.argv[2:]
d='/tmp/rsstrace'; shutil.rmtree(d, ignore_errors=True); os.makedirs(d)
cmd=[b,'--mode','aggregate','--keys','10000000','--rows',str(100_000_000+100_000*20),'--rows-per-second','100000',
     '--throttle-after-rows','100000000','--parallelism','2','--state',d+'/state','--out',d+'/out','--summary-json',d+'/s.json']+extra
t0=time.monotonic()
env=dict(os.environ,RUST_LOG='info'); wall0=time.time()
p=subprocess.Popen(cmd,stdout=subprocess.DEVNULL,stderr=open(d+'/err','w'),env=env)
samples=[]
while True:
    pid,st,ru=os.wait4(p.pid,os.WNOHANG)
    if pid==p.pid: break
    try:
        for line in open(f'/proc/{p.pid}/status'):
            if line.startswith('VmRSS'):
                samples.append((time.monotonic()-t0,int(line.split()[1])/1024))
    except OSError: pass
    time.sleep(0.002)
pk=max(samples,key=lambda s:s[1])
print(f"maxrss {ru.ru_maxrss/1024:.0f} MiB status {st}; peak sampled {pk[1]:.0f} MiB at {pk[0]:.2f} s; end {samples[-1][0]:.1f} s")
last=-1
for t,r in samples:
    if int(t*20)!=last and float(os.environ.get('TL_FROM','0'))<=t<float(os.environ.get('TL_TO','8')) and os.environ.get('TL'):
        last=int(t*20); print(f"{t:6.2f} {r:7.0f}")
import datetime
for line in open(d+'/err'):
    if 'checkpoint complete' in line and os.environ.get('TL'):
        ts=datetime.datetime.strptime(line[:26],'%Y-%m-%dT%H:%M:%S.%f').replace(tzinfo=datetime.timezone.utc).timestamp()
        print(f'ckpt done at {ts-wall0:.2f}', line.split('checkpoint=')[1][:60])
try:
    s=json.load(open(d+'/s.json'))
    pass
except Exception as e: print('summary',e)
