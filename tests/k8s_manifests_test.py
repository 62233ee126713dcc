#!/usr/bin/env python3
"""`ductile k8s` writes manifests that parse as YAML and say what they must.

No Kubernetes cluster runs here: the manifests are parsed (PyYAML) and
their content checked against the flags they were made from:
  - a headless Service selecting the job's pods, with the coordinator's port;
  - three Indexed Jobs (coordinator, servers, workers) whose completions and
    parallelism are the member counts, whose pods share the Service's
    subdomain (so that NAME-coordinator-0.NAME resolves) and restart on
    failure;
  - each container runs `ductile ROLE` with the flags `ductile local` would
    give it: the coordinator's address by name, a server's --host from its
    pod's IP, the training flags on the workers, keys from the Secret;
  - the Secret's items give every member key up to --max_workers, readable
    by the owner only;
  - --state_claim is the state volume of every pod; without it each has an
    emptyDir, and the output warns;
  - --insecure drops the keys; bad names, a missing image and bad counts are
    refused with a message naming the flag;
  - --controller adds a Job running `ductile k8s-controller` as a
    ServiceAccount whose Role may get and patch the worker and server Jobs
    only; it alone mounts the admin key, which the Secret line then holds.
Usage: k8s_manifests_test.py DUCTILE_CLI
"""
import subprocess
import sys

import yaml


def run(ductile, *args):
    p = subprocess.run([ductile, "k8s", *args], capture_output=True,
                       text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def check(condition, what):
    if not condition:
        print("FAIL:", what, file=sys.stderr)
        sys.exit(1)


def main():
    ductile = sys.argv[1]
    code, out, err = run(ductile, "--image=registry.example/ductile:1",
                         "--job_name=mnist", "--servers=2", "--workers=3",
                         "--max_workers=5", "--app=fmnist-mlp", "--epochs=7",
                         "--policy=autoscale:max=5",
                         "--state_claim=mnist-state")
    check(code == 0, "ductile k8s failed: " + err)
    check("admin.key" not in out, "admin.key without --controller")
    docs = [d for d in yaml.safe_load_all(out) if d is not None]
    check(len(docs) == 4, "expected 4 documents, got %d" % len(docs))
    service = docs[0]
    check(service["kind"] == "Service" and service["apiVersion"] == "v1",
          "the first document is not a Service")
    check(service["metadata"]["name"] == "mnist", "Service name")
    check(service["spec"]["clusterIP"] == "None", "the Service is not headless")
    check(service["spec"]["selector"] ==
          {"app.kubernetes.io/instance": "mnist"}, "Service selector")
    check(7000 in [p["port"] for p in service["spec"]["ports"]],
          "the coordinator's port is not on the Service")

    jobs = {d["metadata"]["name"]: d for d in docs[1:]}
    check(sorted(jobs) == ["mnist-coordinator", "mnist-server", "mnist-worker"],
          "Job names: %s" % sorted(jobs))
    counts = {"mnist-coordinator": 1, "mnist-server": 2, "mnist-worker": 3}
    coordinator = "--coordinator=tcp://mnist-coordinator-0.mnist:7000"
    for name, job in jobs.items():
        check(job["kind"] == "Job" and job["apiVersion"] == "batch/v1",
              name + " is not a batch/v1 Job")
        spec = job["spec"]
        check(spec["completionMode"] == "Indexed", name + " is not Indexed")
        check(spec["completions"] == counts[name] and
              spec["parallelism"] == counts[name], name + " counts")
        pod = spec["template"]["spec"]
        labels = spec["template"]["metadata"]["labels"]
        check(labels["app.kubernetes.io/instance"] == "mnist",
              name + " pods are not selected by the Service")
        check(pod["subdomain"] == "mnist", name + " subdomain")
        check(pod["restartPolicy"] == "OnFailure", name + " restartPolicy")
        (container,) = pod["containers"]
        check(container["image"] == "registry.example/ductile:1",
              name + " image")
        check(container["command"] == ["ductile"], name + " command")
        args = container["args"]
        role = name.split("-")[1]
        check(args[0] == role, name + " runs " + args[0])
        check("--keys=/keys" in args, name + " has no --keys")
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        check(mounts["keys"]["mountPath"] == "/keys" and
              mounts["keys"]["readOnly"], name + " keys mount")
        check(mounts["state"]["mountPath"] == "/state", name + " state mount")
        volumes = {v["name"]: v for v in pod["volumes"]}
        check(volumes["state"]["persistentVolumeClaim"]["claimName"] ==
              "mnist-state", name + " does not share the state claim")
        secret = volumes["keys"]["secret"]
        check(secret["defaultMode"] == 0o400, name + " key file mode")
        check(secret["secretName"] == "mnist-keys", name + " Secret name")
        paths = {i["path"] for i in secret["items"]}
        for member in ["server-0", "server-1"] + [
                "worker-%d" % i for i in range(5)]:
            check("members/%s.key" % member in paths,
                  "%s lacks member key %s" % (name, member))
        check("cluster.key" in paths and "admin.pub" in paths,
              name + " lacks the cluster's keys")
        check("admin.key" not in paths and "members/worker-5.key" not in paths,
              name + " mounts keys it must not")
        if role == "coordinator":
            for flag in ["--listen=tcp://0.0.0.0:7000", "--servers=2",
                         "--workers=3", "--max_workers=5", "--state_dir=/state",
                         "--policy=autoscale:max=5", "--checkpoint_every=100",
                         "--disk_reserve_mb=64"]:
                check(flag in args, "coordinator lacks " + flag)
        elif role == "server":
            for flag in [coordinator, "--host=$(POD_IP)", "--port=7100",
                         "--state_dir=/state"]:
                check(flag in args, "server lacks " + flag)
            env = {e["name"]: e for e in container["env"]}
            check(env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] ==
                  "status.podIP", "POD_IP is not the pod's IP")
            check(not any(a.startswith("--server_id") for a in args),
                  "a server id is fixed in a template shared by all servers")
        else:
            for flag in [coordinator, "--app=fmnist-mlp", "--epochs=7"]:
                check(flag in args, "worker lacks " + flag)
            check(not any(a.startswith("--worker_id") for a in args),
                  "a worker id is fixed in a template shared by all workers")

    # Plain: no keys anywhere, and consent to listen beyond loopback.
    code, out, err = run(ductile, "--image=i", "--insecure")
    check(code == 0, "ductile k8s --insecure failed: " + err)
    for doc in yaml.safe_load_all(out):
        if doc is None or doc["kind"] != "Job":
            continue
        pod = doc["spec"]["template"]["spec"]
        check("keys" not in [v["name"] for v in pod["volumes"]],
              "--insecure still mounts keys")
        check("--insecure" in pod["containers"][0]["args"],
              "--insecure is not passed on")
        check({"name": "state", "emptyDir": {}} in pod["volumes"],
              "without --state_claim the state is not an emptyDir")
    check("WARNING: no --state_claim" in out, "no warning without a claim")

    # The controller, and what lets it patch the Jobs.
    code, out, err = run(ductile, "--image=img", "--job_name=mnist",
                         "--servers=2", "--max_servers=4", "--workers=3",
                         "--controller")
    check(code == 0, "ductile k8s --controller failed: " + err)
    check("--from-file=keys/admin.key" in out,
          "the Secret line lacks the admin key")
    docs = [d for d in yaml.safe_load_all(out) if d is not None]
    check(len(docs) == 8, "expected 8 documents, got %d" % len(docs))
    by_kind = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    for kind in ["ServiceAccount", "Role", "RoleBinding", "Job"]:
        check((kind, "mnist-controller") in by_kind, "no %s mnist-controller"
              % kind)
    (rule, pods) = by_kind[("Role", "mnist-controller")]["rules"]
    check(rule["apiGroups"] == ["batch"] and rule["resources"] == ["jobs"] and
          sorted(rule["resourceNames"]) == ["mnist-server", "mnist-worker"] and
          sorted(rule["verbs"]) == ["get", "patch"],
          "the Role allows more or less than get/patch of the two Jobs: %s"
          % rule)
    # Lost members' pods are listed and deleted.
    check(pods == {"apiGroups": [""], "resources": ["pods"],
                   "verbs": ["list", "delete"]},
          "the Role allows more or less than list/delete of pods: %s" % pods)
    binding = by_kind[("RoleBinding", "mnist-controller")]
    check(binding["subjects"] == [{"kind": "ServiceAccount",
                                   "name": "mnist-controller"}] and
          binding["roleRef"]["kind"] == "Role" and
          binding["roleRef"]["name"] == "mnist-controller",
          "the RoleBinding does not bind the Role to the ServiceAccount")
    job = by_kind[("Job", "mnist-controller")]
    check("completionMode" not in job["spec"] and
          job["spec"]["completions"] == 1, "the controller Job's shape")
    pod = job["spec"]["template"]["spec"]
    check(pod["serviceAccountName"] == "mnist-controller",
          "the controller does not run as its ServiceAccount")
    (container,) = pod["containers"]
    check(container["args"] == [
        "k8s-controller", "--coordinator=tcp://mnist-coordinator-0.mnist:7000",
        "--job_name=mnist", "--namespace=$(POD_NAMESPACE)",
        "--max_workers=3", "--max_servers=4", "--keys=/keys",
        "--heartbeat_timeout_ms=5000"],
          "controller args: %s" % container["args"])
    env = {e["name"]: e for e in container["env"]}
    check(env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] ==
          "metadata.namespace", "POD_NAMESPACE is not the pod's namespace")
    check("state" not in [m["name"] for m in container["volumeMounts"]],
          "the controller mounts the state")
    check("--servers=4 --workers=3" in out,
          "the keygen line does not make keys for --max_servers")
    server_items = {i["path"] for i in by_kind[("Job", "mnist-server")]["spec"][
        "template"]["spec"]["volumes"][1]["secret"]["items"]}
    check("members/server-3.key" in server_items and
          "members/server-4.key" not in server_items,
          "server keys are not made up to --max_servers")
    (keys,) = pod["volumes"]
    check({i["path"] for i in keys["secret"]["items"]} ==
          {"cluster.pub", "admin.key", "admin.pub"},
          "the controller's keys: %s" % keys["secret"]["items"])
    for (kind, name), doc in by_kind.items():
        if kind != "Job" or name == "mnist-controller":
            continue
        items = doc["spec"]["template"]["spec"]["volumes"][1]["secret"]["items"]
        check("admin.key" not in {i["path"] for i in items},
              name + " mounts the admin key")
    code, out, err = run(ductile, "--image=i", "--insecure", "--controller")
    check(code == 0, "ductile k8s --insecure --controller failed: " + err)
    (job,) = [d for d in yaml.safe_load_all(out)
              if d is not None and d["kind"] == "Job" and
              d["metadata"]["name"] == "ductile-controller"]
    pod = job["spec"]["template"]["spec"]
    check("volumes" not in pod and "--insecure" in pod["containers"][0]["args"],
          "the plain controller mounts keys or lacks --insecure")
    # The coordinator's heartbeat timeout reaches the controller (its
    # lost members' grace).
    code, out, err = run(ductile, "--image=i", "--insecure", "--controller",
                         "--heartbeat_timeout_ms=7000")
    check(code == 0, "ductile k8s --heartbeat_timeout_ms failed: " + err)
    (job,) = [d for d in yaml.safe_load_all(out)
              if d is not None and d["kind"] == "Job" and
              d["metadata"]["name"] == "ductile-controller"]
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    check(args[-1] == "--heartbeat_timeout_ms=7000",
          "the controller lacks the coordinator's heartbeat timeout: %s"
          % args)

    for args, message in [
            ([], "--image: the container image is needed"),
            (["--image=i", "--job_name=Bad_Name"], "is not a DNS label"),
            (["--image=i", "--job_name=" + "a" * 41], "is not a DNS label"),
            (["--image=i", "--servers=0"], "--servers must be in [1, 1024]"),
            (["--image=i", "--workers=4", "--max_workers=2"],
             "--max_workers must be in [--workers, 65536]"),
            (["--image=i", "--servers=3", "--max_servers=2"],
             "--max_servers must be in [--servers, 1024]"),
            (["--image=i", "--policy=nosuch"], "unknown policy 'nosuch'")]:
        code, out, err = run(ductile, *args)
        check(code != 0, "accepted %s" % args)
        check(message in err, "%s: expected '%s' in: %s" % (args, message, err))
        check(out == "", "%s printed manifests anyway" % args)
    print("PASS")


if __name__ == "__main__":
    main()
