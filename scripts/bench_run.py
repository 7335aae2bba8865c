"""What the Python benchmark scripts share: running one spec with the
release `tidewater` binary as a user would, in a fresh folder with a job
store of its own, and reading its summary."""
import json
import os
import shutil
import subprocess


def run_spec(binary, spec_text, work):
    """Runs `spec_text` in the fresh folder `work` (deleted afterwards).
    Returns (rows/s from the summary, the run's user + system CPU s)."""
    if os.path.exists(work):
        shutil.rmtree(work)
    os.makedirs(work)
    spec = os.path.join(work, "job.toml")
    with open(spec, "w") as f:
        f.write(spec_text)
    summary = os.path.join(work, "summary.json")
    before = os.times()
    subprocess.run(
        [binary, "run", spec, "--progress", "off", "--summary-json", summary,
         "--store", f"sqlite://{work}/jobs.sqlite"],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    with open(summary) as f:
        s = json.load(f)
    shutil.rmtree(work)
    return s["rows_read_in_run"] / s["elapsed_s"], cpu
