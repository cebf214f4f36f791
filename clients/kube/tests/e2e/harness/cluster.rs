//! The control-plane client: namespaces, fake GPU nodes, pods, events, kubectl, the Lease,
//! and the results of the run.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use futures::StreamExt;
use gpusched_client::v1;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Binding, Event, Namespace, Node, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::io::AsyncWriteExt;

use super::env::Env;
use super::pods::{Shape, cards_of};
use super::proxy::Proxy;
use super::{ALLOCATED, HOLDER_SELECTOR, LEASE, LEASE_NS, POOL, SCHEDULER};

/// The harness every scenario gets: the environment, an admin client of the control plane, the
/// Service stand-in, and the result lines of the run.
pub struct H {
    pub env: Env,
    pub client: Client,
    /// A client with the shim's ServiceAccount token (what admission lets write decisions).
    pub as_shim: Client,
    pub proxy: Proxy,
    results: Mutex<Vec<String>>,
    run_id: String,
}

impl H {
    /// Connects to the control plane (admin KUBECONFIG) and starts the Service stand-in on the
    /// ports the scheduler and webhook configurations point at.
    pub async fn connect(env: Env) -> H {
        let client = Client::try_default()
            .await
            .expect("admin client from KUBECONFIG");
        client
            .apiserver_version()
            .await
            .expect("the apiserver answers");
        let kubeconfig = kube::config::Kubeconfig::read_from(&env.shim_kubeconfig)
            .expect("the shim's kubeconfig");
        let shim_cfg = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .expect("a client config from the shim's kubeconfig");
        let as_shim = Client::try_from(shim_cfg).expect("a client as the shim's ServiceAccount");
        let proxy = Proxy::start(env.ext_port, env.wh_port).await;
        H {
            env,
            client,
            as_shim,
            proxy,
            results: Mutex::new(vec![]),
            run_id: format!("{}", std::process::id()),
        }
    }

    /// Writes the result lines as a Markdown list to `E2E_RESULTS`.
    pub fn write_results(&self) {
        let results = self.results.lock().unwrap().clone();
        let text: String = results.iter().map(|l| format!("- {l}\n")).collect();
        std::fs::write(&self.env.results, text).unwrap();
    }

    pub fn say(&self, line: impl Into<String>) {
        let line = line.into();
        eprintln!("[e2e] {line}");
    }

    pub fn result(&self, line: impl Into<String>) {
        let line = line.into();
        eprintln!("[e2e] RESULT {line}");
        self.results.lock().unwrap().push(line);
    }

    pub async fn namespace(&self, name: &str, ignore_webhook: bool) -> String {
        let ns = format!("{name}-{}", self.run_id);
        let mut labels = BTreeMap::new();
        if ignore_webhook {
            labels.insert("hami.io/webhook", "ignore");
        }
        let obj: Namespace =
            serde_json::from_value(json!({"metadata": {"name": ns, "labels": labels}})).unwrap();
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
        ns
    }

    pub async fn make_node(
        &self,
        name: &str,
        pool: &str,
        shape: Shape,
        gpu_allocatable: u32,
    ) -> Vec<v1::Card> {
        let cards = cards_of(name, shape);
        let api: Api<Node> = Api::all(self.client.clone());
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name,
                "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", POOL: pool,
                           "gpusched.e2e/fake-node": "true"},
                // As our node agent writes it (gpusched-hami's encoder, HAMi's JSON form).
                "annotations": {gpusched_hami::NODE_REGISTER: gpusched_hami::encode_register(&cards)}},
            "spec": {}
        }))
        .unwrap();
        api.create(&PostParams::default(), &node).await.unwrap();
        let res = json!({"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": gpu_allocatable.to_string()});
        let status = json!({"status": {"capacity": res, "allocatable": res,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake node (gpusched e2e)"}]}});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
        // TaintNodesByCondition added node.kubernetes.io/not-ready at create; no controller removes it.
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"taints": null}})),
        )
        .await
        .unwrap();
        cards
    }

    pub async fn make_nodes(
        &self,
        prefix: &str,
        pool: &str,
        n: usize,
        shape: Shape,
        gpu_alloc: u32,
    ) -> HashMap<String, Vec<v1::Card>> {
        let names: Vec<String> = (1..=n).map(|i| format!("{prefix}-{i:02}")).collect();
        let made: Vec<(String, Vec<v1::Card>)> = futures::stream::iter(names)
            .map(|name| async move {
                let cards = self.make_node(&name, pool, shape, gpu_alloc).await;
                (name, cards)
            })
            .buffer_unordered(8)
            .collect()
            .await;
        made.into_iter().collect()
    }

    pub async fn create(&self, ns: &str, pod: &Pod) -> Result<Pod, kube::Error> {
        Api::<Pod>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), pod)
            .await
    }

    /// A pod already bound to `node` and holding `devices`, as if gpusched-kube had scheduled it
    /// earlier: created unbound (nothing may create a GPU pod bound or with decision
    /// annotations) with a node selector no node matches, then bound by a Binding that carries
    /// the decision, written with the shim's ServiceAccount token (the only one admission lets
    /// write decisions), exactly like the shim's own bind.
    pub async fn holder(&self, ns: &str, name: &str, node: &str, devices: &str, containers: usize) {
        let cs: Vec<serde_json::Value> = (0..containers)
            .map(|i| {
                json!({"name": format!("c{i}"), "image": "registry.k8s.io/pause:3.10",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}})
            })
            .collect();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"schedulerName": SCHEDULER, "nodeSelector": {HOLDER_SELECTOR: "none"},
                     "containers": cs, "terminationGracePeriodSeconds": 0}
        }))
        .unwrap();
        let created = self.create(ns, &pod).await.unwrap();
        let binding: Binding = serde_json::from_value(json!({
            "metadata": {"name": name, "uid": created.metadata.uid,
                         "annotations": {ALLOCATED: devices, gpusched_hami::VGPU_NODE: node}},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}
        }))
        .unwrap();
        let _: serde_json::Value = Api::<Pod>::namespaced(self.as_shim.clone(), ns)
            .create_subresource("binding", name, &PostParams::default(), &binding)
            .await
            .unwrap_or_else(|e| panic!("binding holder {ns}/{name} as the shim: {e}"));
    }

    pub async fn pod(&self, ns: &str, name: &str) -> Pod {
        Api::<Pod>::namespaced(self.client.clone(), ns)
            .get(name)
            .await
            .unwrap()
    }

    pub async fn events(&self, ns: &str, name: &str) -> Vec<String> {
        let lp = ListParams::default().fields(&format!("involvedObject.name={name}"));
        Api::<Event>::namespaced(self.client.clone(), ns)
            .list(&lp)
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .map(|e| {
                        format!(
                            "{}: {}",
                            e.reason.unwrap_or_default(),
                            e.message.unwrap_or_default()
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
    pub async fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> (bool, String) {
        let mut cmd = tokio::process::Command::new(&self.env.kubectl);
        cmd.args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        if let Some(s) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(s.as_bytes())
                .await
                .unwrap();
        } else {
            drop(child.stdin.take());
        }
        let out = child.wait_with_output().await.unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    pub async fn lease_holder(&self) -> String {
        Api::<Lease>::namespaced(self.client.clone(), LEASE_NS)
            .get(LEASE)
            .await
            .ok()
            .and_then(|l| l.spec?.holder_identity)
            .unwrap_or_default()
    }
}
