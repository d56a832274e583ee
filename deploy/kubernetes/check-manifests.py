#!/usr/bin/env python3
"""Offline checks of the agentx Kubernetes manifests (no cluster needed).

    python3 deploy/kubernetes/check-manifests.py [DIR]

Needs PyYAML (Debian: python3-yaml). It checks that the manifests agree with each other and with
the agentx-host sharding interface: the Indexed Job's completions, parallelism and --shards; the
headless Service's name, port and selector against the pods' subdomain, labels, port and
--coordinator; the run id and the volume of the shard and merge Jobs; the merge Job's list of
shard directories; that every $(VAR) used is defined; and that the keys used are ones the
Kubernetes API knows at the levels checked (a typo would otherwise be dropped silently by
`kubectl apply --validate=false`). It does not replace a server-side dry run.
"""

import os
import re
import sys

import yaml

# Keys of the API objects at the levels these manifests use (core/v1, batch/v1).
KNOWN = {
    "object": {"apiVersion", "kind", "metadata", "spec"},
    "metadata": {"name", "namespace", "labels", "annotations", "generateName"},
    "service.spec": {
        "clusterIP", "clusterIPs", "type", "selector", "ports", "publishNotReadyAddresses",
        "sessionAffinity", "ipFamilies", "ipFamilyPolicy", "internalTrafficPolicy",
    },
    "service.port": {"name", "port", "targetPort", "protocol", "appProtocol", "nodePort"},
    "job.spec": {
        "completionMode", "completions", "parallelism", "backoffLimit", "backoffLimitPerIndex",
        "maxFailedIndexes", "activeDeadlineSeconds", "ttlSecondsAfterFinished", "template",
        "selector", "manualSelector", "suspend", "podFailurePolicy", "podReplacementPolicy",
        "successPolicy",
    },
    "pod.spec": {
        "restartPolicy", "subdomain", "hostname", "containers", "initContainers", "volumes",
        "nodeSelector", "tolerations", "affinity", "serviceAccountName", "securityContext",
        "imagePullSecrets", "terminationGracePeriodSeconds", "priorityClassName",
        "setHostnameAsFQDN", "dnsPolicy", "dnsConfig", "topologySpreadConstraints",
    },
    "container": {
        "name", "image", "imagePullPolicy", "command", "args", "env", "envFrom", "ports",
        "resources", "volumeMounts", "workingDir", "securityContext", "readinessProbe",
        "livenessProbe", "startupProbe", "lifecycle", "stdin", "tty",
    },
    "env": {"name", "value", "valueFrom"},
    "containerPort": {"name", "containerPort", "protocol", "hostPort", "hostIP"},
    "volumeMount": {"name", "mountPath", "subPath", "subPathExpr", "readOnly", "mountPropagation"},
    "volume": {"name", "persistentVolumeClaim", "emptyDir", "configMap", "secret", "hostPath"},
    "pvc.spec": {
        "accessModes", "resources", "storageClassName", "volumeMode", "volumeName", "selector",
        "dataSource", "dataSourceRef",
    },
}

errors = []


def check(ok, what):
    if not ok:
        errors.append(what)
    return ok


def keys(obj, level, where):
    if not isinstance(obj, dict):
        check(False, f"{where}: expected a mapping")
        return
    unknown = set(obj) - KNOWN[level]
    check(not unknown, f"{where}: unknown key(s) {sorted(unknown)}")


def load(path):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    for d in docs:
        keys(d, "object", f"{os.path.basename(path)} {d.get('kind')}")
        keys(d.get("metadata", {}), "metadata", f"{d.get('kind')} metadata")
    return docs


def one(docs, kind, name=None):
    found = [d for d in docs if d.get("kind") == kind
             and (name is None or d["metadata"].get("name") == name)]
    check(len(found) == 1, f"want one {kind} {name or ''}, found {len(found)}")
    return found[0] if found else {}


def container_checks(job, where):
    pod = job["spec"]["template"]["spec"]
    keys(pod, "pod.spec", f"{where} pod spec")
    check(pod.get("restartPolicy") == "Never", f"{where}: restartPolicy should be Never")
    cs = pod.get("containers", [])
    check(len(cs) == 1, f"{where}: want one container")
    c = cs[0] if cs else {}
    keys(c, "container", f"{where} container")
    env = {}
    for e in c.get("env", []):
        keys(e, "env", f"{where} env {e.get('name')}")
        env[e["name"]] = e.get("value")
    for p in c.get("ports", []):
        keys(p, "containerPort", f"{where} port")
    for m in c.get("volumeMounts", []):
        keys(m, "volumeMount", f"{where} volumeMount {m.get('mountPath')}")
    for v in pod.get("volumes", []):
        keys(v, "volume", f"{where} volume {v.get('name')}")
    # $(VAR) references must name a variable of the container (Kubernetes leaves others as is).
    texts = list(c.get("args", [])) + [m.get("subPathExpr", "") for m in c.get("volumeMounts", [])]
    for t in texts:
        for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", str(t)):
            check(var in env, f"{where}: $({var}) is used but not defined in env")
    check(c.get("command") == ["agentx-host"], f"{where}: command should be [agentx-host]")
    return pod, c, env


def flag(args, name):
    try:
        return args[args.index(name) + 1]
    except (ValueError, IndexError):
        check(False, f"flag {name} missing from args")
        return None


def claims(pod):
    return {v["name"]: v["persistentVolumeClaim"]["claimName"]
            for v in pod.get("volumes", []) if "persistentVolumeClaim" in v}


def results_mount(c, pod, where):
    m = [m for m in c.get("volumeMounts", []) if m.get("mountPath") == "/results"]
    check(len(m) == 1, f"{where}: /results must be mounted once")
    if not m:
        return None, None
    return claims(pod).get(m[0]["name"]), m[0].get("subPathExpr")


def main():
    here = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    shards_docs = load(os.path.join(here, "agentx-shards.yaml"))
    merge_docs = load(os.path.join(here, "agentx-merge.yaml"))
    pvc_docs = load(os.path.join(here, "agentx-results-pvc.yaml"))

    svc = one(shards_docs, "Service")
    job = one(shards_docs, "Job")
    merge = one(merge_docs, "Job")
    pvc = one(pvc_docs, "PersistentVolumeClaim")
    if errors:
        return

    # The claim.
    keys(pvc["spec"], "pvc.spec", "PVC spec")
    check("ReadWriteMany" in pvc["spec"].get("accessModes", []), "PVC must be ReadWriteMany")
    claim = pvc["metadata"]["name"]

    # The headless Service.
    keys(svc["spec"], "service.spec", "Service spec")
    for p in svc["spec"].get("ports", []):
        keys(p, "service.port", "Service port")
    check(svc["spec"].get("clusterIP") == "None", "Service must be headless (clusterIP: None)")
    svc_name = svc["metadata"]["name"]
    svc_ports = {p["port"] for p in svc["spec"].get("ports", [])}

    # The shard Job.
    js = job["spec"]
    keys(js, "job.spec", "shard Job spec")
    check(js.get("completionMode") == "Indexed", "shard Job must be completionMode: Indexed")
    n = js.get("completions")
    check(isinstance(n, int) and n >= 1, "completions must be a positive integer")
    check(js.get("parallelism") == n, "parallelism must equal completions (shards rendezvous)")
    pod, c, env = container_checks(job, "shard Job")
    args = [str(a) for a in c.get("args", [])]
    check(args[:1] == ["run"], "shard Job: args must start with `run`")
    check(flag(args, "--shards") == str(n), f"--shards must equal completions ({n})")
    labels = job["spec"]["template"]["metadata"].get("labels", {})
    sel = svc["spec"].get("selector", {})
    check(sel and all(labels.get(k) == v for k, v in sel.items()),
          "Service selector must match the shard pods' labels")
    check(pod.get("subdomain") == svc_name, f"pod subdomain must be the Service name {svc_name}")
    coord = flag(args, "--coordinator")
    want = f"{job['metadata']['name']}-0.{svc_name}:"
    check(coord is not None and coord.startswith(want),
          f"--coordinator must be {want}PORT (pod 0 of the Job under the Service)")
    if coord and ":" in coord:
        port = int(coord.rsplit(":", 1)[1])
        check(port in svc_ports, f"coordinator port {port} is not a Service port")
        check(port in {p["containerPort"] for p in c.get("ports", [])},
              f"coordinator port {port} is not a containerPort")
    check(flag(args, "--output-artifact-dir") == "/results", "--output-artifact-dir must be /results")
    check(flag(args, "--run-id") == "$(AGENTX_RUN_ID)", "--run-id must be $(AGENTX_RUN_ID)")
    shard_claim, shard_sub = results_mount(c, pod, "shard Job")
    check(shard_claim == claim, f"shard Job /results must be the claim {claim}")

    # The merge Job.
    keys(merge["spec"], "job.spec", "merge Job spec")
    mpod, mc, menv = container_checks(merge, "merge Job")
    margs = [str(a) for a in mc.get("args", [])]
    want = ["merge"] + [f"/results/shard-{i}" for i in range(n)] + ["-o", "/results/merged"]
    check(margs == want, f"merge args {margs} should be {want}")
    merge_claim, merge_sub = results_mount(mc, mpod, "merge Job")
    check(merge_claim == claim, f"merge Job /results must be the claim {claim}")
    check(merge_sub == shard_sub, "merge and shard Jobs must mount the same run directory")
    check(menv.get("AGENTX_RUN_ID") == env.get("AGENTX_RUN_ID"),
          "AGENTX_RUN_ID differs between agentx-shards.yaml and agentx-merge.yaml")
    check(mc.get("image") == c.get("image"), "merge and shard Jobs should use the same image")


if __name__ == "__main__":
    main()
    for e in errors:
        print(f"FAIL {e}")
    if errors:
        sys.exit(1)
    print("PASS manifests agree with each other and with the sharding interface")
