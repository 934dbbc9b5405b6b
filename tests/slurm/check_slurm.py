"""The SLURM workflow profile against a real one-node SLURM cluster on this machine.

    sudo .venv/bin/python tests/slurm/check_slurm.py [--keep]

Needs root (slurmd runs as root) and Debian's `slurmctld slurmd munge slurm-client` packages
(`apt-get install slurmctld slurmd munge slurm-client`). Not part of the pytest suite: it takes ~10 minutes.

What it does, everything under one temporary directory (`--keep` leaves it for reading) but slurm.conf and
gres.conf, which go to /etc/slurm/ for the check's duration (it refuses to run where they exist: srun inside a
job looks there, see Cluster):
1. brings up a cluster: a munge key and munged, slurm.conf and gres.conf for this host (one partition, 8 CPUs and
   2 stand-in GPUs declared, so the profile's 4-thread, 1-GPU jobs can be placed on a 2-core GPU-less machine),
   slurmctld and slurmd, each stopped by its PID at the end;
2. runs the smoke DAG (`all`) from a clean clone of this repository's HEAD through
   `--workflow-profile profiles/slurm` with the profile's partition filled in for that cluster, then reads every
   job back from the controller (`scontrol show job`, not Snakemake's output) and checks it ran as its own
   SLURM job, completed, with the CPUs, memory, time limit and GPUs the profile and the rule promise;
3. submits the same DAG again: it must submit nothing;
4. in a second clone, trains one longer text stage through SLURM, cancels its job (`scancel`) once a training
   state is saved, and checks that Snakemake resubmits it (the profile's `retries`), that the second job resumes
   from the saved step, and that the weights equal those of the same stage trained without a cancel.

The cluster has no accounting database (slurmdbd): `sacct` cannot answer, so the profile's account stays unset
(the plugin cannot validate one) and job status is read with squeue, which MinJobAge keeps answering.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "scontrol", "scancel", "squeue", "sinfo")
CPUS, GPUS, MEMORY_MB = 8, 2, 64000  # declared for the test node (SlurmdParameters=config_overrides)
PARTITION = "vlbind"
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")  # written for the check's duration, removed afterwards
STAGE = "results/models/seed0/text_s1/model.safetensors"  # the stage the cancel test trains
CANCEL_OVERLAY = {"train": {"max_steps": 400, "target_accuracy": None, "checkpoint_every": 50, "eval_every": 50}}


def fail(msg: str) -> None:
    raise SystemExit(f"check_slurm: FAILED: {msg}")


def say(msg: str) -> None:
    print(f"check_slurm [{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Cluster:
    """A one-node SLURM cluster whose every file lives under `base`; `env` points clients at it."""

    def __init__(self, base: Path) -> None:
        self.base, self.host = base, socket.gethostname().split(".")[0]
        # Where srun looks by default: the SLURM executor's job step drops SLURM_CONF (every SLURM_* variable but
        # the job's identity) from the environment of the srun it starts inside a job
        # (snakemake-executor-plugin-slurm-jobstep 0.6.1), so a slurm.conf elsewhere is not found there.
        self.conf = SYSTEM_CONF
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.pids: dict[str, Path] = {d: base / f"{d}.pid" for d in DAEMONS}

    def write(self) -> None:
        b = self.base
        for d in ("state", "spool", "munge"):
            (b / d).mkdir(parents=True, exist_ok=True)
        key = b / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        ports = free_ports(2)
        self.conf.write_text(f"""ClusterName=vlbind-check
SlurmctldHost={self.host}
SlurmctldPort={ports[0]}
SlurmdPort={ports[1]}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={b}/munge/munge.socket
SlurmUser=root
StateSaveLocation={b}/state
SlurmdSpoolDir={b}/spool
SlurmctldPidFile={self.pids['slurmctld']}
SlurmdPidFile={self.pids['slurmd']}
SlurmctldLogFile={b}/slurmctld.log
SlurmdLogFile={b}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
GresTypes=gpu
ReturnToService=2
MinJobAge=86400
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc={b}/jobcomp.txt
NodeName={self.host} CPUs={CPUS} RealMemory={MEMORY_MB} Gres=gpu:{GPUS} State=UNKNOWN
PartitionName={PARTITION} Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
""")
        # A GPU-less node reports no GPUs, and a node that reports fewer than slurm.conf declares is set INVALID
        # ("gres/gpu count reported lower than configured"): declare stand-in device files, which slurmd counts
        # (it only checks that they exist). Jobs see CUDA_VISIBLE_DEVICES and no CUDA: they run on the CPU.
        (b / "dev").mkdir(exist_ok=True)
        for i in range(GPUS):
            (b / "dev" / f"nvidia{i}").touch()
        gres = f"AutoDetect=off\nNodeName={self.host} Name=gpu File={b}/dev/nvidia[0-{GPUS - 1}]\n"
        (self.conf.parent / "gres.conf").write_text(gres)

    def start(self) -> None:
        b = self.base
        run(["munged", "--force", f"--key-file={b}/munge/munge.key", f"--socket={b}/munge/munge.socket",
             f"--pid-file={self.pids['munged']}", f"--log-file={b}/munge/munged.log",
             f"--seed-file={b}/munge/munged.seed"], self.env)
        run(["slurmctld", "-f", str(self.conf)], self.env)
        run(["slurmd", "-f", str(self.conf)], self.env)
        for _ in range(60):
            state = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=self.env, capture_output=True,
                                   text=True).stdout.strip()
            if state in ("idle", "mixed", "allocated"):
                say(f"cluster up: node {self.host} {state}, {CPUS} CPUs, {GPUS} stand-in GPUs, partition "
                    f"{PARTITION}")
                return
            time.sleep(1)
        fail(f"the node never became idle (sinfo: {state!r}); see {b}/slurmd.log and {b}/slurmctld.log")

    def stop(self) -> None:
        for conf in (self.conf, self.conf.parent / "gres.conf"):
            conf.unlink(missing_ok=True)
        for d in reversed(DAEMONS):
            pid_file = self.pids[d]
            if pid_file.exists():
                try:
                    os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
                except (ProcessLookupError, ValueError):
                    pass
        time.sleep(2)

    def jobs(self) -> list[dict]:
        """Every job the controller knows (MinJobAge keeps finished ones), as scontrol's key=value fields."""
        out = subprocess.run(["scontrol", "show", "job", "-o", "-d"], env=self.env, capture_output=True,
                             text=True).stdout
        return [parse_fields(line) for line in out.splitlines() if line.startswith("JobId=")]


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run(cmd: list[str], env: dict, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        fail(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def parse_fields(line: str) -> dict:
    """scontrol's one-line record: KEY=value pairs separated by spaces (values may hold '=' and ',')."""
    fields, key = {}, None
    for token in line.split(" "):
        m = re.match(r"^([A-Za-z:/_]+)=(.*)$", token)
        if m:
            key = m.group(1)
            fields[key] = m.group(2)
        elif key and token:
            fields[key] += " " + token
    return {k: v.strip() for k, v in fields.items()}


def minutes(limit: str) -> int:
    """scontrol's TimeLimit ([D-]HH:MM:SS) in minutes."""
    if limit == "UNLIMITED":
        return -1
    days, _, hms = limit.rpartition("-")
    h, m, s = (int(x) for x in hms.split(":"))
    return int(days or 0) * 1440 + h * 60 + m + (s > 0)


def promises(repo: Path, config: dict) -> tuple[dict, dict]:
    """(per rule what the rule declares: gpu / train-sized runtime and memory, the profile's settings)."""
    profile = yaml.safe_load((repo / "profiles/slurm/config.yaml").read_text())
    rules = {}
    for smk in sorted((repo / "workflow/rules").glob("*.smk")):
        for block in re.split(r"\n(?=rule |checkpoint )", smk.read_text()):
            m = re.match(r"(?:rule|checkpoint) (\w+):", block)
            if m:
                rules[m.group(1)] = {"gpu": 'gpu=config["resources"]["gpus"]' in block,
                                     "threads": 'threads: config["resources"]["threads"]' in block,
                                     "train_sized": 'config["resources"]["train_runtime_min"]' in block}
    return rules, profile


def expected(rule: str, rules: dict, profile: dict, config: dict) -> dict:
    res, defaults = config["resources"], profile["default-resources"]
    declared = rules[rule]
    return {"cpus": profile.get("set-threads", {}).get(rule, res["threads"] if declared["threads"] else 1),
            "mem_mb": res["train_mem_mb"] if declared["train_sized"] else defaults["mem_mb"],
            "minutes": res["train_runtime_min"] if declared["train_sized"] else defaults["runtime"],
            "gpus": res["gpus"] if declared["gpu"] else 0}


def allocated(job: dict) -> dict:
    """CPUs, memory and time limit the controller allocated (TRES, TimeLimit), and the GPUs the job holds: without
    an accounting database (slurmdbd) a finished job's TRES has no gres/gpu, so that is the job's GPU request
    (TresPerJob), which the controller enforces (gpu_overlap checks it did)."""
    tres = dict(kv.split("=", 1) for kv in job.get("TRES", "").split(",") if "=" in kv)
    mem = tres.get("mem", "0M")
    mem_mb = int(float(mem[:-1]) * (1024 if mem.endswith("G") else 1)) if mem[-1] in "MG" else int(mem)
    gpus = re.search(r"gres:gpu:(\d+)", job.get("TresPerJob", ""))
    return {"cpus": int(job["NumCPUs"]), "mem_mb": mem_mb, "minutes": minutes(job["TimeLimit"]),
            "gpus": int(gpus.group(1)) if gpus else 0}


def gpu_overlap(jobs: list[dict]) -> int:
    """The most GPUs that jobs held at one time (from their start and end times)."""
    events = sorted((t, d * allocated(j)["gpus"]) for j in jobs for t, d in ((j["StartTime"], 1), (j["EndTime"], -1)))
    held = most = 0
    for _, d in sorted(events, key=lambda e: (e[0], e[1])):  # an end before a start at the same second
        held += d
        most = max(most, held)
    return most


def rule_of(job: dict) -> str:
    m = re.match(r"rule_(\w+?)(?:_wildcards_.*)?$", job.get("Comment", ""))
    if not m:
        fail(f"SLURM job {job['JobId']} carries no rule in its comment ({job.get('Comment')!r})")
    return m.group(1)


def snakemake(repo: Path, cluster: Cluster, args: list[str], log: Path, background: bool = False):
    exe = Path(sys.executable).with_name("snakemake")
    cmd = [str(exe), "--workflow-profile", "profiles/slurm", "--slurm-init-seconds-before-status-checks", "5",
           "--slurm-status-command", "squeue", *args]
    say(f"{repo.name}$ {' '.join(cmd[1:])}  (log {log})")
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=repo, env=cluster.env, stdout=f, stderr=subprocess.STDOUT, text=True)
    return proc if background else proc.wait()


def clone(base: Path, name: str) -> Path:
    repo = base / name
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    profile = repo / "profiles/slurm/config.yaml"
    text = profile.read_text()
    if '# slurm_partition: "cpu"' not in text:
        fail(f"{profile} has no '# slurm_partition: \"cpu\"' line to fill in for this cluster")
    profile.write_text(text.replace('# slurm_partition: "cpu"', f'slurm_partition: "{PARTITION}"'))
    return repo


def check_dag(base: Path, cluster: Cluster) -> None:
    repo = clone(base, "dag")
    config = yaml.safe_load((repo / "config/config.yaml").read_text())
    smoke = yaml.safe_load((repo / "config/smoke.yaml").read_text())
    config["resources"] |= smoke.get("resources", {})
    rules, profile = promises(repo, config)
    t0, known = time.time(), {j["JobId"] for j in cluster.jobs()}
    if snakemake(repo, cluster, ["all", "--configfile", "config/smoke.yaml"], base / "dag.log") != 0:
        fail(f"the smoke DAG through SLURM failed: {base / 'dag.log'}")
    say(f"smoke DAG through SLURM: done in {time.time() - t0:.0f} s")
    verify_jobs([j for j in cluster.jobs() if j["JobId"] not in known], base / "dag.log", rules, profile, config)
    before = len(cluster.jobs())
    if snakemake(repo, cluster, ["all", "--configfile", "config/smoke.yaml"], base / "dag-again.log") != 0:
        fail(f"the second run failed: {base / 'dag-again.log'}")
    if len(cluster.jobs()) != before or "Nothing to be done" not in (base / "dag-again.log").read_text():
        fail(f"the second run submitted jobs: {base / 'dag-again.log'}")
    say("a second run submits nothing")


def verify_jobs(jobs: list[dict], dag_log: Path, rules: dict, profile: dict, config: dict) -> None:
    """Every Snakemake job of the DAG ran as its own SLURM job, completed, with the promised resources."""
    ran = re.findall(r"(\d+) of (\d+) steps \(100%\) done", dag_log.read_text())
    if not ran:
        fail("the smoke DAG's log does not end with all steps done")
    n_jobs = int(ran[-1][1]) - 1  # the target rule `all` runs in the main process, not as a SLURM job
    if len(jobs) != n_jobs:
        fail(f"{len(jobs)} SLURM jobs for {n_jobs} Snakemake jobs: each job must run as its own SLURM job")
    bad = []
    for job in jobs:
        rule = rule_of(job)
        want, got = expected(rule, rules, profile, config), allocated(job)
        if job["JobState"] != "COMPLETED" or job.get("ExitCode") != "0:0" or got != want \
                or job.get("Partition") != PARTITION:
            bad.append(f"{job['JobId']} {rule}: {job['JobState']} exit {job.get('ExitCode')} partition "
                       f"{job.get('Partition')}, allocated {got}, promised {want}")
    if bad:
        fail("jobs that did not run as promised:\n  " + "\n  ".join(bad))
    if not 0 < gpu_overlap(jobs) <= GPUS:
        fail(f"jobs held {gpu_overlap(jobs)} GPUs at once on a node with {GPUS}: the GPU requests were not enforced")
    by_rule: dict[str, dict] = {}
    for job in jobs:
        by_rule.setdefault(rule_of(job), {"n": 0, **allocated(job)})["n"] += 1
    for rule, a in sorted(by_rule.items()):
        say(f"  {rule}: {a['n']} SLURM jobs, {a['cpus']} CPUs, {a['mem_mb']} MB, {a['minutes']} min, "
            f"{a['gpus']} GPU")
    say(f"every one of the {len(jobs)} jobs ran as its own SLURM job, COMPLETED, with the promised resources")


def check_cancel(base: Path, cluster: Cluster) -> None:
    overlay = base / "cancel.yaml"
    overlay.write_text(yaml.safe_dump({"stages": {"text_s1": CANCEL_OVERLAY}}))
    args = ["--configfile", "config/smoke.yaml", str(overlay), "--", STAGE]
    repo = clone(base, "cancel")
    before = {j["JobId"] for j in cluster.jobs()}
    proc = snakemake(repo, cluster, args, base / "cancel.log", background=True)
    resume = repo / Path(STAGE).with_name("resume.safetensors")
    deadline = time.time() + 600
    while not resume.exists():
        if proc.poll() is not None or time.time() > deadline:
            fail(f"the stage ended before a training state was saved: {base / 'cancel.log'}")
        time.sleep(0.5)
    running = [j for j in cluster.jobs() if j["JobId"] not in before and j["JobState"] == "RUNNING"]
    if len(running) != 1:
        fail(f"expected one running training job, found {[(j['JobId'], j['JobState']) for j in running]}")
    job_id = running[0]["JobId"]
    run(["scancel", job_id], cluster.env)
    say(f"cancelled SLURM job {job_id} ({rule_of(running[0])}) after its first saved state")
    if proc.wait() != 0:
        fail(f"Snakemake did not recover from the cancel: {base / 'cancel.log'}")
    new = [j for j in cluster.jobs() if j["JobId"] not in before]
    states = sorted((j["JobId"], j["JobState"]) for j in new)
    if [s for _, s in states] != ["CANCELLED", "COMPLETED"]:
        fail(f"expected the cancelled job and one resubmitted, completed job; SLURM has {states}")
    history = (repo / Path(STAGE).with_name("train.log")).read_text()
    resumed = re.findall(r"resumed text_s1 from step (\d+)", history)
    if not resumed or int(resumed[0]) <= 0:
        fail(f"the resubmitted job did not resume from a saved state:\n{history[-2000:]}")
    say(f"resubmitted as job {states[1][0]}, resumed from step {resumed[0]}")
    reference = clone(base, "reference")  # the same stage through SLURM (the same threads), not cancelled
    if snakemake(reference, cluster, args, base / "reference.log") != 0:
        fail(f"the reference run failed: {base / 'reference.log'}")
    if not same_tensors(repo / STAGE, reference / STAGE):
        fail("the resumed stage's weights differ from the same stage trained without a cancel")
    say("its weights equal those of the same stage trained through SLURM without a cancel")


def same_tensors(a: Path, b: Path) -> bool:
    from safetensors.torch import load_file

    ta, tb = load_file(a), load_file(b)
    return ta.keys() == tb.keys() and all(ta[k].equal(tb[k]) for k in ta)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, clones)")
    ap.add_argument("--only", choices=["dag", "cancel"], help="run one of the two checks")
    args = ap.parse_args()
    missing = [b for b in (*DAEMONS, *CLIENTS) if shutil.which(b) is None]
    if missing:
        fail(f"{', '.join(missing)} not found: apt-get install slurmctld slurmd munge slurm-client")
    if os.geteuid() != 0:
        fail("run as root: slurmd must (sudo .venv/bin/python tests/slurm/check_slurm.py)")
    for conf in (SYSTEM_CONF, SYSTEM_CONF.parent / "gres.conf"):
        if conf.exists():
            fail(f"{conf} exists: this machine has a SLURM configuration of its own; run on one without")
    SYSTEM_CONF.parent.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="vlbind-slurm-"))
    cluster = Cluster(base)
    t0 = time.time()
    try:
        cluster.write()
        cluster.start()
        if args.only != "cancel":
            check_dag(base, cluster)
        if args.only != "dag":
            check_cancel(base, cluster)
    finally:
        cluster.stop()
        if args.keep:
            say(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    say(f"PASSED in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
