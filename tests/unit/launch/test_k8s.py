"""The manifests of `cpuft k8s manifest`, validated as a cluster would: core kinds against
Kubernetes' own schemas in strict mode, the TrainJob against Kubeflow Trainer's models, whose
round trip must give the manifest back (they drop unknown fields silently)."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml
from kubeflow_trainer_api.models import TrainerV1alpha1TrainJob

from cpuft.cli.main import main
from cpuft.errors import CpuftError
from cpuft.launch.k8s import ManifestRequest, indexed_job, trainjob

K8S_VERSION = "1.34"


def request(**kw: object) -> ManifestRequest:
    base: dict[str, object] = dict(name="ft", nodes=2, cpus="16", memory="32Gi",
                                   image="registry.local/team/ft:1", nproc_per_node=2,
                                   command=["train", "--max-steps", "9"], volume="ft-runs")
    return ManifestRequest(**{**base, **kw})  # type: ignore[arg-type]


def test_the_trainjob_holds_what_kubeflow_reads_and_nothing_it_drops():
    manifest = trainjob(request())
    assert TrainerV1alpha1TrainJob.from_dict(manifest).to_dict() == manifest
    trainer = manifest["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (2, 2)  # never one rank a CPU
    assert trainer["resourcesPerNode"]["limits"] == {"cpu": "16", "memory": "32Gi"}
    assert trainer["command"] == [
        "python", "-m", "cpuft", "launch", "--nnodes", "2", "--nproc-per-node", "2",
        "--rdzv-id", "ft", "--", "train", "--max-steps", "9", "--output-dir",
        "/checkpoints/ft", "--resume", "auto"]
    pod = manifest["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
        "replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 300
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "ft-runs"


def test_a_misspelt_field_is_caught_by_the_round_trip():
    manifest = trainjob(request())
    manifest["spec"]["trainer"]["numNode"] = manifest["spec"]["trainer"].pop("numNodes")
    assert TrainerV1alpha1TrainJob.from_dict(manifest).to_dict() != manifest


def test_the_indexed_job_and_its_service_pass_kubernetes_strict_schemas():
    service, job = indexed_job(request(namespace="ml"))
    for doc in (service, job):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"]
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == \
        ("Indexed", 2, 2)
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == "ft" and pod["terminationGracePeriodSeconds"] == 300
    command = pod["containers"][0]["command"]
    assert command[command.index("--rdzv-endpoint") + 1] == "ft-0.ft:29400"
    broken = {**job, "spec": {**spec, "completion": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_a_script_of_ones_own_keeps_its_own_output():
    [command] = [trainjob(request(command=["python", "/app/train.py", "--resume"]))[
        "spec"]["trainer"]["command"]]
    assert command[command.index("--"):] == ["--", "python", "/app/train.py", "--resume"]


@pytest.mark.parametrize("changes, message", [
    ({"name": "My_Job"}, "--name 'My_Job'"),
    ({"nproc_per_node": 0}, "never left to Kubeflow's default"),
    ({"cpus": "sixteen"}, "--cpus 'sixteen' is not a Kubernetes quantity"),
    ({"memory": "32 GB"}, "--memory '32 GB'"),
    ({"image": "a b"}, "--image 'a b'"),
    ({"volume": "Runs!"}, "--volume 'Runs!'"),
    ({"grace_s": 5}, "--grace must be at least 30 seconds"),
])
def test_what_a_cluster_would_refuse_is_refused_here(changes, message):
    with pytest.raises(CpuftError, match=message.replace("(", r"\(")):
        trainjob(request(**changes))


def test_the_command_line_writes_yaml_and_warns_without_a_volume(capsys):
    assert main(["k8s", "manifest", "--nodes", "2", "--cpus", "8", "--memory", "16Gi",
                 "--image", "reg/ft:1", "--kind", "job", "--", "train"]) == 0
    out, err = capsys.readouterr()
    service, job = yaml.safe_load_all(out)
    assert (service["kind"], job["kind"]) == ("Service", "Job")
    assert "no --volume: the run's checkpoints" in err
    assert main(["k8s", "manifest", "--nodes", "2", "--cpus", "8", "--memory", "16Gi",
                 "--image", "reg/ft:1", "--", "train", "--lr", "-1"]) == 2


def test_an_elastic_job_has_its_store_apart_and_pods_that_come_back():
    store_service, store, service, job = indexed_job(request(
        min_nodes=1, store_selector={"cloud.example.com/lifecycle": "on-demand"}))
    for doc in (store_service, store, service, job):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    assert store["kind"] == "Deployment" and store["spec"]["replicas"] == 1
    pod = store["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"cloud.example.com/lifecycle": "on-demand"}
    assert pod["containers"][0]["command"][-2:] == ["--listen", "$(POD_IP):29400"]
    assert store_service["metadata"]["name"] == "ft-rendezvous"
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--nnodes") + 1] == "1:2"
    assert command[command.index("--rdzv-endpoint") + 1] == "ft-rendezvous:29400"
    spec = job["spec"]
    assert spec["podFailurePolicy"]["rules"][0] == {
        "action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert spec["successPolicy"] == {"rules": [{"succeededCount": 1}]}
    with pytest.raises(CpuftError, match="--min-nodes makes an Indexed Job"):
        trainjob(request(min_nodes=1))
    with pytest.raises(CpuftError, match="--min-nodes 3: from 1 to --nodes 2"):
        indexed_job(request(min_nodes=3))
    with pytest.raises(CpuftError, match="not a Kubernetes label"):
        indexed_job(request(min_nodes=1, store_selector={"bad key": "x"}))
