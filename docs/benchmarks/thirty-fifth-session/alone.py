import os, json, subprocess, sys, shutil, resource, time
binary, rows, rounds, ivs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(',')
res = {iv: [] for iv in ivs}
for r in range(rounds):
    order = ivs if r % 2 == 0 else ivs[::-1]
    for iv in order:
        d = '/tmp/alone-run'; shutil.rmtree(d, ignore_errors=True); os.makedirs(d)
        t = time.monotonic()
        p = subprocess.Popen([binary, '--mode', 'aggregate', '--rows', rows, '--keys', '1000000', '--parallelism', '2',
            '--checkpoint-interval', iv, '--state', d + '/state', '--out', d + '/out', '--summary-json', d + '/s.json'],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ, RUST_LOG='warn'))
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.monotonic() - t
        cpu = ru.ru_utime + ru.ru_stime
        n = sum(1 for c in json.load(open(d + '/s.json'))['checkpoints'] if c['kind'] == 'periodic')
        res[iv].append((cpu, wall, n))
        print(f"round {r+1} {iv}: cpu {cpu:.2f} wall {wall:.2f} ckpts {n}", flush=True)
base = ivs[0]
for iv in ivs[1:]:
    ratios = [b[0] / a[0] for a, b in zip(res[base], res[iv])]
    per = [(b[0] - a[0]) / b[2] * 1000 for a, b in zip(res[base], res[iv]) if b[2]]
    ratios_s = sorted(ratios); per_s = sorted(per)
    print(f"{iv}/{base} cpu per round: {', '.join(f'{x:.3f}' for x in ratios)}; median {ratios_s[len(ratios)//2]:.4f}; ms per checkpoint: {', '.join(f'{x:.0f}' for x in per)}; median {per_s[len(per)//2] if per else 0:.0f}")
