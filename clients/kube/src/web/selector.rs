//! Label selectors of the operator view: the page's `?selector=` (which nodes to show) and a
//! pod's `spec.nodeSelector` (which nodes are its candidates). Equality terms only
//! (`key=value,key2=value2`); a node matches when it has every label with that value.

use std::collections::BTreeMap;

/// A conjunction of `key=value` terms; empty matches every node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector(Vec<(String, String)>);

impl Selector {
    /// Parses `key=value,key2=value2` (spaces around terms allowed; `==` accepted); the error
    /// says which term is wrong.
    pub fn parse(text: &str) -> Result<Selector, String> {
        let mut terms = Vec::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (k, v) = term
                .split_once("==")
                .or_else(|| term.split_once('='))
                .ok_or_else(|| format!("selector term {term:?} is not key=value"))?;
            let (k, v) = (k.trim(), v.trim());
            if k.is_empty() || k.contains('!') {
                return Err(format!(
                    "selector term {term:?}: only key=value terms are supported"
                ));
            }
            terms.push((k.to_owned(), v.to_owned()));
        }
        Ok(Selector(terms))
    }

    /// A pod's `spec.nodeSelector`.
    pub fn of_map(m: Option<&BTreeMap<String, String>>) -> Selector {
        Selector(
            m.into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        )
    }

    /// Whether labels satisfy every term.
    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        self.0
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
    }

    /// Both selectors' terms.
    pub fn and(&self, other: &Selector) -> Selector {
        Selector(self.0.iter().chain(&other.0).cloned().collect())
    }

    /// Back to `key=value,...`.
    pub fn text(&self) -> String {
        self.0
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn terms_parse_and_match() {
        let l = labels(&[("pool", "a"), ("zone", "z1")]);
        // (selector, matches l)
        for (text, want) in [
            ("", true),
            ("pool=a", true),
            (" pool = a , zone==z1 ", true),
            ("pool=b", false),
            ("gpu=yes", false),
            ("pool=a,zone=z2", false),
        ] {
            let s = Selector::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(s.matches(Some(&l)), want, "{text}");
        }
        assert!(!Selector::parse("pool=a").is_ok_and(|s| s.matches(None)));
        for bad in ["pool", "pool!=a", "=a"] {
            let e = Selector::parse(bad).expect_err(bad);
            assert!(e.contains(bad.trim_start_matches('=')), "{bad}: {e}");
        }
        let s = Selector::parse("a=1")
            .unwrap_or_default()
            .and(&Selector::of_map(Some(&labels(&[("b", "2")]))));
        assert_eq!(s.text(), "a=1,b=2");
    }
}
