"""The Kubernetes manifests' selectors, offline (deploy/validate/rendered_policy.py): every
overlay renders to a NetworkPolicy that admits the documented clients (cmestream-client=true
pods to gRPC, the monitoring namespace to metrics) and nobody else, with Services, the
PodDisruptionBudget and the policy selecting the daemon's pods. The kustomize emulation is
itself checked: it reproduces the includeSelectors rewrite of the policy's peer selectors (the
bug this check exists for), and where a kubectl that can render the overlays is installed its
output equals kubectl's object for object.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "deploy", "validate"))
import rendered_policy as rp  # noqa: E402


def by_name(objs):
    return sorted(objs, key=lambda o: (o["kind"], o["metadata"]["name"]))


def with_selector_labels(tmp):
    """A copy of deploy/kubernetes whose base writes the daemon's label into every selector
    (includeSelectors: true), as it did before."""
    tree = os.path.join(tmp, "kubernetes")
    shutil.copytree(rp.KUSTOMIZE_DIR, tree)
    path = os.path.join(tree, "base", "kustomization.yaml")
    with open(path) as f:
        k = yaml.safe_load(f)
    for spec in k["labels"]:
        if "app.kubernetes.io/name" in spec["pairs"]:
            spec["includeSelectors"] = True
    with open(path, "w") as f:
        yaml.safe_dump(k, f)
    return tree


class RenderedPolicyTest(unittest.TestCase):
    def test_every_overlay_admits_the_documented_clients_only(self):
        overlays = rp.overlays()
        self.assertGreaterEqual(len(overlays), 3)
        for overlay in overlays:
            objs = rp.render(overlay)
            self.assertEqual(rp.check(objs, overlay), [])
            policy = next(o for o in objs if o["kind"] == "NetworkPolicy")
            grpc_peers = policy["spec"]["ingress"][0]["from"]
            self.assertEqual(grpc_peers, [{"podSelector": {"matchLabels": {"cmestream-client": "true"}}}])

    def test_selector_labels_would_deny_the_clients(self):
        # The check fails on the former base: the peer selector also requires the daemon's label.
        with tempfile.TemporaryDirectory() as tmp:
            tree = with_selector_labels(tmp)
            for overlay in rp.overlays(tree):
                objs = rp.render(overlay)
                failures = rp.check(objs, overlay)
                self.assertEqual(len(failures), 1, failures)
                self.assertIn("a cmestream-client=true pod is denied port 50051", failures[0])
                policy = next(o for o in objs if o["kind"] == "NetworkPolicy")
                self.assertEqual(policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"],
                                 {"cmestream-client": "true", "app.kubernetes.io/name": "cmestreamd"})

    def test_policy_semantics(self):
        pod = {"app.kubernetes.io/name": "cmestreamd"}
        policy = {"spec": {"podSelector": {"matchLabels": pod}, "policyTypes": ["Ingress"], "ingress": [
            {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "a"}},
                       "podSelector": {"matchLabels": {"x": "1"}}}],
             "ports": [{"protocol": "TCP", "port": "grpc"}]}]}}
        ports = {"grpc": 50051}
        # namespaceSelector and podSelector in one peer: both must hold.
        self.assertTrue(rp.admits(policy, pod, {"x": "1"}, "a", 50051, ports))
        self.assertFalse(rp.admits(policy, pod, {"x": "1"}, "b", 50051, ports))
        self.assertFalse(rp.admits(policy, pod, {"x": "2"}, "a", 50051, ports))
        self.assertFalse(rp.admits(policy, pod, {"x": "1"}, "a", 9464, ports))
        # A pod the policy does not select is not isolated; no ingress rules deny everything.
        self.assertTrue(rp.admits(policy, {"other": "pod"}, {}, "b", 1, ports))
        policy["spec"]["ingress"] = []
        self.assertFalse(rp.admits(policy, pod, {"x": "1"}, "a", 50051, ports))
        self.assertTrue(rp.selects({}, {"any": "thing"}))
        self.assertFalse(rp.selects(None, {"any": "thing"}))
        self.assertTrue(rp.selects({"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]},
                                   {"k": "v"}))

    def test_unsupported_kustomization_field_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "kustomization.yaml"), "w") as f:
                f.write("namePrefix: x-\nresources: []\n")
            with self.assertRaisesRegex(rp.RenderError, "namePrefix"):
                rp.render(tmp)

    def test_emulation_equals_kubectl(self):
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            self.skipTest("kubectl not installed: emulation not compared with kustomize")
        with tempfile.TemporaryDirectory() as tmp:
            trees = [rp.KUSTOMIZE_DIR, with_selector_labels(tmp)]
            for tree in trees:
                for overlay in rp.overlays(tree):
                    p = subprocess.run([kubectl, "kustomize", overlay], capture_output=True, text=True)
                    if p.returncode != 0:
                        self.skipTest(f"this kubectl cannot render the overlays (kustomize in kubectl "
                                      f">= 1.24 needed): {p.stderr.strip()[:200]}")
                    theirs = [d for d in yaml.safe_load_all(p.stdout) if d]
                    self.assertEqual(by_name(rp.render(overlay)), by_name(theirs), overlay)


if __name__ == "__main__":
    unittest.main(verbosity=2)
