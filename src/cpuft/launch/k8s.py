"""The manifests of ``cpuft k8s manifest``: a Kubeflow Trainer TrainJob, or, for a cluster
without Kubeflow, an Indexed Job with a headless Service. Each pod runs the per-node mode
(``cpuft launch --nnodes``), which places that pod's ranks from the CPUs it really has.

Kubeflow's torch runtime sets ``PET_NNODES``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR`` and
``PET_MASTER_PORT`` in each pod, which the per-node mode reads; an Indexed Job gives each pod
``JOB_COMPLETION_INDEX`` and, through the Service, a stable name for pod 0 to meet at. The ranks
a pod runs are set explicitly in both: Kubeflow's torch runtime would otherwise start one
one-thread rank per CPU of the pod.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from cpuft.errors import CpuftError
from cpuft.launch.sbatch import rank_command

RDZV_PORT = 29400
CHECKPOINTS = "/checkpoints"
CONTAINER = "node"
"""The trainer's replicated job and container in Kubeflow's torch runtimes."""
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?")
_LABEL = re.compile(r"([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_QUANTITY = re.compile(r"\d+(\.\d+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?")


@dataclass(kw_only=True, frozen=True)
class ManifestRequest:
    name: str
    nodes: int
    cpus: str
    """CPUs a pod asks for and is limited to (a Kubernetes quantity: ``16``, ``15500m``)."""
    memory: str
    image: str
    command: list[str]
    """What the ranks run: ``train ARGS`` or ``python SCRIPT ARGS`` (a path in the image)."""
    nproc_per_node: int = 1
    volume: str | None = None
    """A PersistentVolumeClaim every pod mounts at /checkpoints, where a train run writes."""
    grace_s: int = 300
    """How long a pod has between SIGTERM and SIGKILL: enough for a checkpoint."""
    namespace: str | None = None
    runtime: str = "torch-distributed"
    """The Kubeflow ClusterTrainingRuntime the TrainJob runs on."""
    min_nodes: int | None = None
    """An elastic job (Indexed Job only): it goes on while this many pods are left."""
    store_selector: dict[str, str] | None = None
    """An elastic job: the nodeSelector of its rendezvous store's pod (an on-demand node)."""


def _checked(req: ManifestRequest) -> None:
    if not _DNS_LABEL.fullmatch(req.name):
        raise CpuftError(f"--name {req.name!r}: lower-case letters, digits and '-', at most 42 "
                         "(pods are named after it)")
    if req.namespace is not None and not _DNS_LABEL.fullmatch(req.namespace):
        raise CpuftError(f"--namespace {req.namespace!r} is not a Kubernetes name")
    if req.nodes < 1:
        raise CpuftError("--nodes must be at least 1")
    if req.nproc_per_node < 1:
        raise CpuftError("--nproc-per-node must be at least 1: a pod's ranks are never left "
                         "to Kubeflow's default of one a CPU")
    for flag, value in (("--cpus", req.cpus), ("--memory", req.memory)):
        if not _QUANTITY.fullmatch(value):
            raise CpuftError(f"{flag} {value!r} is not a Kubernetes quantity (e.g. 16, 15500m, "
                             "64Gi)")
    if not req.image or any(c.isspace() for c in req.image):
        raise CpuftError(f"--image {req.image!r}: give an image reference")
    if req.volume is not None and not _DNS_LABEL.fullmatch(req.volume):
        raise CpuftError(f"--volume {req.volume!r} is not a PersistentVolumeClaim name")
    if req.grace_s < 30:
        raise CpuftError("--grace must be at least 30 seconds: a pod needs time to checkpoint")
    if req.min_nodes is not None and not 1 <= req.min_nodes <= req.nodes:
        raise CpuftError(f"--min-nodes {req.min_nodes}: from 1 to --nodes {req.nodes}")
    for key, value in (req.store_selector or {}).items():
        if not _LABEL.fullmatch(key) or not _LABEL_VALUE.fullmatch(value):
            raise CpuftError(f"--store-selector {key}={value}: not a Kubernetes label")


def pod_command(req: ManifestRequest, endpoint: str | None) -> list[str]:
    """Each pod's command: the per-node mode; a train run writes to the volume and resumes
    there when the pod is started again."""
    command = list(req.command)
    if command[:1] == ["train"]:
        if req.volume and not any(a == "--output-dir" or a.startswith("--output-dir=")
                                  for a in command):
            command += ["--output-dir", f"{CHECKPOINTS}/{req.name}"]
        command = rank_command(command)
    nodes = str(req.nodes) if req.min_nodes is None else f"{req.min_nodes}:{req.nodes}"
    argv = ["python", "-m", "cpuft", "launch", "--nnodes", nodes, "--nproc-per-node",
            str(req.nproc_per_node), "--rdzv-id", req.name]
    if endpoint:
        argv += ["--rdzv-endpoint", endpoint]
    return [*argv, "--", *command]


def _resources(req: ManifestRequest) -> dict[str, Any]:
    amounts = {"cpu": req.cpus, "memory": req.memory}
    # Requests equal to limits: the Guaranteed class, whose CPUs are not shared.
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _metadata(req: ManifestRequest) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": req.name, "labels": {"app.kubernetes.io/name": "cpuft"}}
    if req.namespace:
        meta["namespace"] = req.namespace
    return meta


def trainjob(req: ManifestRequest) -> dict[str, Any]:
    """A Kubeflow Trainer TrainJob (trainer.kubeflow.org/v1alpha1)."""
    _checked(req)
    if req.min_nodes is not None:
        raise CpuftError("--min-nodes makes an Indexed Job (--kind job): Kubernetes starts its "
                         "lost pods again, and its rendezvous store runs apart")
    pod: dict[str, Any] = {"terminationGracePeriodSeconds": req.grace_s}
    if req.volume:
        pod["volumes"] = [{"name": "checkpoints",
                           "persistentVolumeClaim": {"claimName": req.volume}}]
        pod["containers"] = [{"name": CONTAINER, "volumeMounts": [
            {"name": "checkpoints", "mountPath": CHECKPOINTS}]}]
    patch = {"template": {"spec": {"replicatedJobs": [
        {"name": CONTAINER, "template": {"spec": {"template": {"spec": pod}}}}]}}}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": _metadata(req),
        "spec": {
            "runtimeRef": {"name": req.runtime},
            "trainer": {
                "image": req.image,
                "numNodes": req.nodes,
                "numProcPerNode": req.nproc_per_node,
                "resourcesPerNode": _resources(req),
                # The rendezvous comes from PET_MASTER_ADDR and PET_MASTER_PORT.
                "command": pod_command(req, endpoint=None),
            },
            "runtimePatches": [{"manager": "cpuft", "trainingRuntimeSpec": patch}],
        },
    }


def rendezvous_store(req: ManifestRequest) -> list[dict[str, Any]]:
    """An elastic job's rendezvous store: one pod (a Deployment, started again wherever it is
    lost) serving ``cpuft rendezvous`` on its own address, and a Service naming it."""
    name = f"{req.name}-rendezvous"
    labels = {"app.kubernetes.io/name": "cpuft", "app.kubernetes.io/component": name}
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": {**_metadata(req), "name": name},
        "spec": {"selector": labels, "ports": [{"name": "rendezvous", "port": RDZV_PORT}]},
    }
    pod: dict[str, Any] = {"containers": [{
        "name": "rendezvous", "image": req.image,
        "command": ["python", "-m", "cpuft", "rendezvous", "--listen",
                    f"$(POD_IP):{RDZV_PORT}"],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "rendezvous", "containerPort": RDZV_PORT}],
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                      "limits": {"cpu": "1", "memory": "512Mi"}},
    }]}
    if req.store_selector:
        pod["nodeSelector"] = dict(req.store_selector)
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {**_metadata(req),
                                                                    "name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": pod}},
    }
    return [service, deployment]


def indexed_job(req: ManifestRequest) -> list[dict[str, Any]]:
    """A headless Service and an Indexed Job (batch/v1): pod i is ``NAME-i.NAME``; an elastic
    job's store before them."""
    _checked(req)
    selector = {"batch.kubernetes.io/job-name": req.name}
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": _metadata(req),
        "spec": {"clusterIP": "None", "selector": selector,
                 # Pod 0's name must resolve before it is ready: the others meet there.
                 "publishNotReadyAddresses": True,
                 "ports": [{"name": "rendezvous", "port": RDZV_PORT}]},
    }
    elastic = req.min_nodes is not None
    endpoint = (f"{req.name}-rendezvous:{RDZV_PORT}" if elastic
                else f"{req.name}-0.{req.name}:{RDZV_PORT}")
    container: dict[str, Any] = {
        "name": CONTAINER, "image": req.image,
        "command": pod_command(req, endpoint=endpoint),
        "resources": _resources(req),
        "ports": [{"name": "rendezvous", "containerPort": RDZV_PORT}],
    }
    pod: dict[str, Any] = {"subdomain": req.name, "restartPolicy": "Never",
                           "terminationGracePeriodSeconds": req.grace_s,
                           "containers": [container]}
    if req.volume:
        container["volumeMounts"] = [{"name": "checkpoints", "mountPath": CHECKPOINTS}]
        pod["volumes"] = [{"name": "checkpoints",
                           "persistentVolumeClaim": {"claimName": req.volume}}]
    job: dict[str, Any] = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": _metadata(req),
        "spec": {"completionMode": "Indexed", "completions": req.nodes,
                 "parallelism": req.nodes, "backoffLimit": 0,
                 "template": {"metadata": {"labels": {"app.kubernetes.io/name": "cpuft"}},
                              "spec": pod}},
    }
    if not elastic:
        return [service, job]
    job["spec"].update({
        # A pod lost with its node (preempted, evicted, drained) is started again and rejoins;
        # the job is done once any pod ends well: its agents end well only when training has.
        "backoffLimit": 10 * req.nodes,
        "podFailurePolicy": {"rules": [{"action": "Ignore",
                                        "onPodConditions": [{"type": "DisruptionTarget",
                                                            "status": "True"}]}]},
        "successPolicy": {"rules": [{"succeededCount": 1}]},
    })
    return [*rendezvous_store(req), service, job]
