"""``cpuft k8s manifest``: Kubernetes manifests for a cpuft job on N pods."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

DESCRIPTION = """\
Write the manifests of a cpuft job on N pods, one node's ranks a pod:

  cpuft k8s manifest --nodes 4 --cpus 32 --memory 64Gi --image reg/team/ft:1 \\
      --volume ft-runs -- train --model /models/bert --train-file /data/train.csv
  cpuft k8s manifest --kind job ... -- python /app/train.py    # no Kubeflow in the cluster

--kind trainjob (the default) writes a Kubeflow Trainer TrainJob; --kind job writes an Indexed
Job with a headless Service for clusters without Kubeflow. Each pod runs `cpuft launch
--nnodes N` with --nproc-per-node ranks (never one a CPU), asks for and is limited to --cpus
and --memory, and gets --grace seconds between SIGTERM and SIGKILL for a checkpoint. With
--volume, train writes to /checkpoints/NAME on that claim and resumes there (--resume auto).
The image needs cpuft, its Python packages and iproute2. Apply with `kubectl apply -f FILE`.
"""


def register(sub: Any) -> None:
    p = sub.add_parser("k8s", help="run on Kubernetes: write a job's manifests",
                       description="Kubernetes: write the manifests of a cpuft job.")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    m = verbs.add_parser("manifest", help="write a TrainJob, or an Indexed Job and Service",
                         description=DESCRIPTION,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    m.add_argument("--nodes", type=int, required=True, help="pods, one a node")
    m.add_argument("--cpus", required=True, help="CPUs a pod asks for and is limited to")
    m.add_argument("--memory", required=True, help="memory a pod asks for and is limited to")
    m.add_argument("--image", required=True, help="the container image, with cpuft in it")
    m.add_argument("--nproc-per-node", type=int, default=1, help="ranks a pod (default: 1)")
    m.add_argument("--volume", help="a PersistentVolumeClaim for the run's checkpoints")
    m.add_argument("--name", default="cpuft", help="the job's name (default: cpuft)")
    m.add_argument("--namespace", help="the namespace (default: kubectl's)")
    m.add_argument("--grace", type=int, default=300, metavar="SECONDS",
                   help="seconds between SIGTERM and SIGKILL, for a checkpoint (default: 300)")
    m.add_argument("--kind", choices=("trainjob", "job"), default="trainjob",
                   help="trainjob (Kubeflow Trainer) or job (an Indexed Job and a Service)")
    m.add_argument("--runtime", default="torch-distributed",
                   help="the TrainJob's ClusterTrainingRuntime (default: torch-distributed)")
    m.add_argument("--min-nodes", type=int, default=None,
                   help="an elastic job (with --kind job): it goes on while this many pods are "
                        "left; lost pods are started again and rejoin; its rendezvous store "
                        "runs in a pod of its own")
    m.add_argument("--store-selector", action="append", default=[], metavar="KEY=VALUE",
                   help="a node label for the store's pod: put it on an on-demand node")
    m.add_argument("--output", "-o", default="-", help="file to write (default: stdout)")
    m.add_argument("--force", action="store_true", help="replace the --output file")
    m.add_argument("command", nargs=argparse.REMAINDER,
                   help="-- train [ARGS...] or -- python SCRIPT.py [ARGS...]: what the ranks run "
                        "(paths as the image has them)")
    p.set_defaults(handler=run)


def _selector(pairs: list[str]) -> dict[str, str] | None:
    from cpuft.errors import CpuftError

    selector = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise CpuftError(f"--store-selector {pair!r}: give KEY=VALUE")
        selector[key] = value
    return selector or None


def run(args: argparse.Namespace) -> int:
    import yaml

    from cpuft.cli.flags import rank_train_config
    from cpuft.cli.output import write_file
    from cpuft.errors import CpuftError
    from cpuft.launch.k8s import ManifestRequest, indexed_job, trainjob
    from cpuft.launch.program import USAGE

    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if command[:1] == ["train"]:  # checked now, not in a pod
        rank_train_config(command[1:], args.min_nodes, args.nodes)
    elif not (len(command) > 1 and os.path.basename(command[0]).startswith("python")):
        raise CpuftError(USAGE.replace("cpuft launch", "cpuft k8s manifest ..."))
    else:
        command[0] = "python"  # the image's interpreter
    request = ManifestRequest(
        name=args.name, nodes=args.nodes, cpus=args.cpus, memory=args.memory, image=args.image,
        command=command, nproc_per_node=args.nproc_per_node, volume=args.volume,
        grace_s=args.grace, namespace=args.namespace, runtime=args.runtime,
        min_nodes=args.min_nodes, store_selector=_selector(args.store_selector))
    docs = [trainjob(request)] if args.kind == "trainjob" else indexed_job(request)
    text = yaml.safe_dump_all(docs, sort_keys=False)
    if command[0] == "train" and not args.volume:
        print("cpuft: warning: no --volume: the run's checkpoints and model stay in each pod and "
              "go with it", file=sys.stderr)
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    if os.path.exists(args.output) and not args.force:
        raise CpuftError(f"--output {args.output} exists: pass --force to replace it")
    write_file(args.output, text, "--output")
    print(f"wrote {args.output}: apply it with `kubectl apply -f {args.output}`",
          file=sys.stderr)
    return 0
