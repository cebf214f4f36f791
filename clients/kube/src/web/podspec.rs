//! A pod spec pasted into the what-if form (or sent to `POST /api/v1/what-if`), YAML or JSON,
//! read into the parts of a Pod the shim sends the service: namespace, name, annotations,
//! `spec.nodeSelector`, and each container's name and resource limits and requests. Any other
//! field is ignored. What is malformed is an error naming its field
//! (`spec.containers[1].resources.limits["nvidia.com/gpu"]: ...`), never a panic; what the
//! values mean (quantities, annotations) the service judges, naming its fields too.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Map, Value, json};

/// The largest spec read, bytes.
pub const MAX_SPEC_BYTES: usize = 256 * 1024;

/// A malformed spec: the field and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecError {
    /// The field, as a path (`spec.containers[0].name`), or `spec` for the document.
    pub field: String,
    /// What is wrong and what is accepted.
    pub message: String,
}

fn bad(field: impl Into<String>, message: impl Into<String>) -> SpecError {
    SpecError {
        field: field.into(),
        message: message.into(),
    }
}

/// The document as a JSON value: JSON when it parses as JSON, YAML otherwise.
fn document(text: &str) -> Result<Value, SpecError> {
    if text.len() > MAX_SPEC_BYTES {
        return Err(bad(
            "spec",
            format!(
                "{} bytes, more than the {MAX_SPEC_BYTES} accepted",
                text.len()
            ),
        ));
    }
    if text.trim().is_empty() {
        return Err(bad("spec", "empty: paste a Pod (YAML or JSON)"));
    }
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        return Ok(v);
    }
    serde_saphyr::from_str::<Value>(text)
        .map_err(|e| bad("spec", format!("neither JSON nor YAML: {e}")))
}

fn object<'a>(v: &'a Value, field: &str) -> Result<&'a Map<String, Value>, SpecError> {
    v.as_object()
        .ok_or_else(|| bad(field, format!("must be a mapping, not {}", kind(v))))
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

fn string(v: &Value, field: &str) -> Result<String, SpecError> {
    v.as_str()
        .map(str::to_owned)
        .ok_or_else(|| bad(field, format!("must be a string, not {}", kind(v))))
}

/// A map of strings: annotations and nodeSelector (numbers and booleans read as their text, as
/// YAML writers often leave them unquoted), or resource quantities (`quantity`: strings and
/// numbers only).
fn string_map(
    v: Option<&Value>,
    field: &str,
    quantity: bool,
) -> Result<BTreeMap<String, String>, SpecError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(BTreeMap::new());
    };
    object(v, field)?
        .iter()
        .map(|(k, x)| {
            let s = match x {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) if !quantity => b.to_string(),
                other => {
                    let want = if quantity {
                        "a quantity (a string or a number)"
                    } else {
                        "a string"
                    };
                    return Err(bad(
                        format!("{field}[{k:?}]"),
                        format!("must be {want}, not {}", kind(other)),
                    ));
                }
            };
            Ok((k.clone(), s))
        })
        .collect()
}

/// The containers of one list (`spec.containers`, `spec.initContainers`).
fn containers(v: Option<&Value>, field: &str) -> Result<Vec<Value>, SpecError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let list = v
        .as_array()
        .ok_or_else(|| bad(field, format!("must be a list, not {}", kind(v))))?;
    list.iter()
        .enumerate()
        .map(|(i, c)| {
            let f = format!("{field}[{i}]");
            let c = object(c, &f)?;
            let name = match c.get("name") {
                None | Some(Value::Null) => format!("container-{i}"),
                Some(n) => string(n, &format!("{f}.name"))?,
            };
            let mut limits = BTreeMap::new();
            let mut requests = BTreeMap::new();
            if let Some(r) = c.get("resources").filter(|r| !r.is_null()) {
                let rf = format!("{f}.resources");
                let r = object(r, &rf)?;
                limits = string_map(r.get("limits"), &format!("{rf}.limits"), true)?;
                requests = string_map(r.get("requests"), &format!("{rf}.requests"), true)?;
            }
            Ok(json!({"name": name, "resources": {"limits": limits, "requests": requests}}))
        })
        .collect()
}

/// Reads a pasted Pod. `scheduler_name` is set on it (the what-if asks as if the pod were ours).
pub fn parse(text: &str, scheduler_name: &str) -> Result<Pod, SpecError> {
    let doc = document(text)?;
    let top = object(&doc, "spec")?;
    if let Some(k) = top.get("kind").filter(|k| !k.is_null()) {
        let k = string(k, "kind")?;
        if k != "Pod" {
            return Err(bad("kind", format!("{k:?}: only a Pod is accepted")));
        }
    }
    let empty = Value::Object(Map::new());
    let meta = top
        .get("metadata")
        .filter(|m| !m.is_null())
        .unwrap_or(&empty);
    let meta = object(meta, "metadata")?;
    let name = match meta.get("name") {
        None | Some(Value::Null) => "what-if".to_owned(),
        Some(n) => string(n, "metadata.name")?,
    };
    let namespace = match meta.get("namespace") {
        None | Some(Value::Null) => "default".to_owned(),
        Some(n) => string(n, "metadata.namespace")?,
    };
    let annotations = string_map(meta.get("annotations"), "metadata.annotations", false)?;
    let spec = top
        .get("spec")
        .filter(|s| !s.is_null())
        .ok_or_else(|| bad("spec.containers", "missing: a Pod needs spec.containers"))?;
    let spec = object(spec, "spec")?;
    let node_selector = string_map(spec.get("nodeSelector"), "spec.nodeSelector", false)?;
    let main = containers(spec.get("containers"), "spec.containers")?;
    if main.is_empty() {
        return Err(bad("spec.containers", "must list at least one container"));
    }
    let init = containers(spec.get("initContainers"), "spec.initContainers")?;
    let pod = json!({
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations,
                     "uid": format!("what-if-{namespace}-{name}")},
        "spec": {"schedulerName": scheduler_name, "nodeSelector": node_selector,
                 "containers": main, "initContainers": init}
    });
    serde_json::from_value(pod).map_err(|e| bad("spec", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(p: &Pod, i: usize) -> BTreeMap<String, String> {
        p.spec.as_ref().map_or_else(BTreeMap::new, |s| {
            s.containers[i]
                .resources
                .as_ref()
                .and_then(|r| r.limits.as_ref())
                .map(|l| l.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect())
                .unwrap_or_default()
        })
    }

    #[test]
    fn yaml_and_json_pods_are_read() {
        let yaml = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: trainer\n  annotations:\n    hami.io/gpu-scheduler-policy: spread\nspec:\n  nodeSelector: {pool: a}\n  containers:\n  - name: main\n    image: x\n    resources:\n      limits: {nvidia.com/gpu: 2, nvidia.com/gpumem: \"4096\"}\n";
        let json = r#"{"metadata":{"name":"trainer","annotations":{"hami.io/gpu-scheduler-policy":"spread"}},
            "spec":{"nodeSelector":{"pool":"a"},"containers":[{"name":"main","resources":{"limits":{"nvidia.com/gpu":2,"nvidia.com/gpumem":"4096"}}}]}}"#;
        for text in [yaml, json] {
            let p = parse(text, "ours").unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(p.metadata.name.as_deref(), Some("trainer"));
            assert_eq!(p.metadata.namespace.as_deref(), Some("default"));
            let spec = p
                .spec
                .as_ref()
                .map(|s| (s.scheduler_name.clone(), s.node_selector.clone()));
            assert_eq!(
                spec,
                Some((
                    Some("ours".to_owned()),
                    Some([("pool".to_owned(), "a".to_owned())].into())
                ))
            );
            assert_eq!(
                limits(&p, 0),
                [
                    ("nvidia.com/gpu".to_owned(), "2".to_owned()),
                    ("nvidia.com/gpumem".to_owned(), "4096".to_owned())
                ]
                .into()
            );
        }
    }

    /// Each malformed spec and the field its error names.
    #[test]
    fn malformed_specs_name_their_field() {
        let cases = [
            ("", "spec"),
            ("[1, 2]", "spec"),
            ("kind: Deployment\nspec: {containers: [{name: a}]}", "kind"),
            ("metadata: {name: a}", "spec.containers"),
            ("spec: {containers: []}", "spec.containers"),
            ("spec: {containers: {name: a}}", "spec.containers"),
            ("spec: {containers: [7]}", "spec.containers[0]"),
            (
                "spec: {containers: [{name: [x]}]}",
                "spec.containers[0].name",
            ),
            (
                "spec: {containers: [{name: a}, {name: b, resources: {limits: {nvidia.com/gpu: [1]}}}]}",
                "spec.containers[1].resources.limits[\"nvidia.com/gpu\"]",
            ),
            (
                "spec: {containers: [{name: a, resources: {requests: 3}}]}",
                "spec.containers[0].resources.requests",
            ),
            (
                "spec: {containers: [{name: a}], initContainers: [{name: i, resources: []}]}",
                "spec.initContainers[0].resources",
            ),
            (
                "metadata: {annotations: {hami.io/x: {a: 1}}}\nspec: {containers: [{name: a}]}",
                "metadata.annotations[\"hami.io/x\"]",
            ),
            (
                "metadata: {name: 5}\nspec: {containers: [{name: a}]}",
                "metadata.name",
            ),
            (
                "spec: {nodeSelector: [a], containers: [{name: a}]}",
                "spec.nodeSelector",
            ),
            ("spec: {containers: [{name: a}]\n  bad: : :", "spec"),
        ];
        for (text, field) in cases {
            let e = parse(text, "ours").expect_err(text);
            assert_eq!(e.field, field, "{text:?}: {e}");
            assert!(e.to_string().starts_with(field), "{e}");
        }
        // Deep nesting and alias bombs are refused, not a stack overflow or a hang.
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(parse(&deep, "ours").expect_err("deep").field, "spec");
        let deep_map = "a: ".repeat(60_000);
        assert_eq!(
            parse(&deep_map, "ours").expect_err("deep map").field,
            "spec"
        );
        let bomb = "a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e]\ng: [*f, *f, *f, *f, *f, *f, *f, *f]\n";
        assert!(parse(bomb, "ours").is_err());
        let big = "x".repeat(MAX_SPEC_BYTES + 1);
        assert_eq!(parse(&big, "ours").expect_err("too big").field, "spec");
    }
}
