"""RSS of one 10M-key backfill run over time, sampled from /proc every 2 ms.

    python3 rsstrace.py BINARY [extra backfill args, e.g. --checkpoint-interval 1s --incremental]

Prints the peak (maxrss from wait4, and the highest sample with its time).
With TL=1, also the samples every 50 ms between TL_FROM and TL_TO seconds
(default 0 and 8) and when each checkpoint completed (from the run's log).
"""
import datetime
import os
import shutil
import subprocess
import sys
import time

binary, extra = sys.argv[1], sys.argv[2:]
work = '/tmp/rsstrace'
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
command = [binary, '--mode', 'aggregate', '--keys', '10000000',
           '--rows', str(100_000_000 + 100_000 * 20), '--rows-per-second', '100000',
           '--throttle-after-rows', '100000000', '--parallelism', '2',
           '--state', work + '/state', '--out', work + '/out'] + extra
started, wall_started = time.monotonic(), time.time()
child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=open(work + '/err', 'w'),
                         env=dict(os.environ, RUST_LOG='info'))
samples = []
while True:
    pid, status, usage = os.wait4(child.pid, os.WNOHANG)
    if pid == child.pid:
        break
    try:
        for line in open(f'/proc/{child.pid}/status'):
            if line.startswith('VmRSS'):
                samples.append((time.monotonic() - started, int(line.split()[1]) / 1024))
    except OSError:
        pass
    time.sleep(0.002)
at, peak = max(samples, key=lambda s: s[1])
print(f"maxrss {usage.ru_maxrss / 1024:.0f} MiB status {status}; "
      f"peak sampled {peak:.0f} MiB at {at:.2f} s; end {samples[-1][0]:.1f} s")
if os.environ.get('TL'):
    since, until = float(os.environ.get('TL_FROM', '0')), float(os.environ.get('TL_TO', '8'))
    last = -1
    for t, rss in samples:
        if int(t * 20) != last and since <= t < until:
            last = int(t * 20)
            print(f"{t:6.2f} {rss:7.0f}")
    for line in open(work + '/err'):
        if 'checkpoint complete' in line:
            stamp = datetime.datetime.strptime(line[:26], '%Y-%m-%dT%H:%M:%S.%f')
            done = stamp.replace(tzinfo=datetime.timezone.utc).timestamp() - wall_started
            print(f"ckpt done at {done:.2f}", line.split('checkpoint=')[1][:60])
