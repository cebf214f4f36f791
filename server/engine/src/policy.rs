//! Node and GPU policies: closed enums, parsed once at the edge.

use std::fmt;
use std::str::FromStr;

/// How nodes are ranked (`docs/placement-semantics.md` section 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodePolicy {
    /// Highest node score wins.
    Binpack,
    /// Lowest node score wins.
    Spread,
    /// The smallest increase of the node's expected fragmentation wins (section 12.3).
    Fgd,
}

impl NodePolicy {
    /// The policy's annotation value.
    pub fn as_str(self) -> &'static str {
        match self {
            NodePolicy::Binpack => "binpack",
            NodePolicy::Spread => "spread",
            NodePolicy::Fgd => "fgd",
        }
    }
}

/// Why a node policy value was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseNodePolicyError {
    /// Blank value.
    #[error("must not be empty; accepted: binpack, spread, fgd")]
    Empty,
    /// Not `binpack` or `spread` (case-sensitive); the trimmed value.
    #[error("unknown node policy {0:?}; accepted: binpack, spread, fgd")]
    Unknown(String),
}

impl FromStr for NodePolicy {
    type Err = ParseNodePolicyError;

    /// Parses an annotation or config value: trimmed, then case-sensitive.
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value.trim() {
            "binpack" => Ok(NodePolicy::Binpack),
            "spread" => Ok(NodePolicy::Spread),
            "fgd" => Ok(NodePolicy::Fgd),
            "" => Err(ParseNodePolicyError::Empty),
            other => Err(ParseNodePolicyError::Unknown(other.to_owned())),
        }
    }
}

impl fmt::Display for NodePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One GPU policy token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GpuToken {
    /// Higher device score first (sort key).
    Binpack,
    /// Lower device score first (sort key).
    Spread,
    /// Only idle cards (filter).
    Mutex,
    /// Choose among fitting cards by pair scores (filter).
    TopologyAware,
    /// Higher NUMA id first (sort key).
    Numa,
    /// Smaller increase of the node's expected fragmentation first (sort key, section 12.3).
    Fgd,
}

impl GpuToken {
    /// All tokens, in the order of the accepted-values message.
    pub const ALL: [GpuToken; 6] = [
        GpuToken::Binpack,
        GpuToken::Spread,
        GpuToken::Mutex,
        GpuToken::TopologyAware,
        GpuToken::Numa,
        GpuToken::Fgd,
    ];

    /// The token's annotation value.
    pub fn as_str(self) -> &'static str {
        match self {
            GpuToken::Binpack => "binpack",
            GpuToken::Spread => "spread",
            GpuToken::Mutex => "mutex",
            GpuToken::TopologyAware => "topology-aware",
            GpuToken::Numa => "numa",
            GpuToken::Fgd => "fgd",
        }
    }
}

const ACCEPTED_GPU: &str =
    "accepted: binpack, spread, mutex, topology-aware, numa, fgd, or a comma chain of them";

/// Why a GPU policy value (or one token of it) was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseGpuPolicyError {
    /// Blank value.
    #[error("must not be empty; {ACCEPTED_GPU}")]
    Empty,
    /// A blank entry in a chain (`binpack,,numa`, `binpack,`); `position` counts from 1.
    #[error("entry {position} of the chain is blank; {ACCEPTED_GPU}")]
    BlankEntry {
        /// Position of the blank entry, from 1.
        position: usize,
    },
    /// An entry that is no token (case-sensitive); the trimmed entry.
    #[error("unknown GPU policy {0:?}; {ACCEPTED_GPU}")]
    Unknown(String),
}

impl FromStr for GpuToken {
    type Err = ParseGpuPolicyError;

    /// Parses one token: trimmed, then case-sensitive.
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value.trim() {
            "" => Err(ParseGpuPolicyError::Empty),
            v => GpuToken::ALL
                .into_iter()
                .find(|t| t.as_str() == v)
                .ok_or_else(|| ParseGpuPolicyError::Unknown(v.to_owned())),
        }
    }
}

impl fmt::Display for GpuToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A GPU policy: one token (a plain policy) or a chain of distinct tokens, in written order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GpuPolicy {
    tokens: Vec<GpuToken>,
}

impl GpuPolicy {
    /// A plain policy.
    pub fn single(token: GpuToken) -> Self {
        GpuPolicy {
            tokens: vec![token],
        }
    }

    /// A policy from tokens; repeats count once, where they first appear. `None` when empty.
    pub fn from_tokens(tokens: &[GpuToken]) -> Option<Self> {
        let mut out: Vec<GpuToken> = Vec::with_capacity(tokens.len());
        for t in tokens {
            if !out.contains(t) {
                out.push(*t);
            }
        }
        if out.is_empty() {
            None
        } else {
            Some(GpuPolicy { tokens: out })
        }
    }

    /// The distinct tokens in order.
    pub fn tokens(&self) -> &[GpuToken] {
        &self.tokens
    }

    /// Whether the policy includes `token`.
    pub fn contains(&self, token: GpuToken) -> bool {
        self.tokens.contains(&token)
    }

    /// How cards are visited for one container under this policy.
    pub fn visit_plan(&self, numa_bind: bool) -> VisitPlan {
        let mutex = self.contains(GpuToken::Mutex);
        let topology = self.contains(GpuToken::TopologyAware);
        let keys: Vec<SortKey> = match self.tokens.as_slice() {
            [GpuToken::Binpack] if numa_bind => vec![SortKey::NumaAsc, SortKey::ScoreDesc],
            [GpuToken::Binpack] => vec![SortKey::ScoreDesc, SortKey::NumaDesc],
            [GpuToken::Spread | GpuToken::TopologyAware] if numa_bind => {
                vec![SortKey::NumaDesc, SortKey::ScoreAsc]
            }
            [GpuToken::Spread | GpuToken::TopologyAware] => {
                vec![SortKey::ScoreAsc, SortKey::NumaDesc]
            }
            [GpuToken::Fgd] if numa_bind => {
                vec![SortKey::NumaAsc, SortKey::FragAsc, SortKey::ScoreDesc]
            }
            [GpuToken::Fgd] => vec![SortKey::FragAsc, SortKey::ScoreDesc, SortKey::NumaDesc],
            [GpuToken::Mutex] if numa_bind => vec![SortKey::NumaDesc, SortKey::IdleFirst],
            [GpuToken::Mutex] => vec![SortKey::IdleFirst, SortKey::NumaDesc],
            chain => {
                let mut keys: Vec<SortKey> = chain
                    .iter()
                    .filter_map(|t| match t {
                        GpuToken::Binpack => Some(SortKey::ScoreDesc),
                        GpuToken::Spread => Some(SortKey::ScoreAsc),
                        GpuToken::Numa => Some(SortKey::NumaDesc),
                        GpuToken::Fgd => Some(SortKey::FragAsc),
                        GpuToken::Mutex | GpuToken::TopologyAware => None,
                    })
                    .collect();
                if keys.is_empty() {
                    keys.push(SortKey::ScoreAsc);
                }
                if numa_bind && keys.first() != Some(&SortKey::NumaDesc) {
                    keys.retain(|k| *k != SortKey::NumaDesc);
                    keys.insert(0, SortKey::NumaDesc);
                }
                keys
            }
        };
        VisitPlan {
            keys,
            mutex,
            topology,
            numa_bind,
        }
    }
}

impl FromStr for GpuPolicy {
    type Err = ParseGpuPolicyError;

    /// Parses an annotation or config value such as `binpack` or `binpack, numa`: each entry
    /// trimmed and compared case-sensitively; blank entries are errors.
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        if value.trim().is_empty() {
            return Err(ParseGpuPolicyError::Empty);
        }
        let mut tokens = Vec::new();
        for (i, raw) in value.split(',').enumerate() {
            match raw.parse::<GpuToken>() {
                Ok(t) => tokens.push(t),
                Err(ParseGpuPolicyError::Empty) => {
                    return Err(ParseGpuPolicyError::BlankEntry { position: i + 1 });
                }
                Err(e) => return Err(e),
            }
        }
        GpuPolicy::from_tokens(&tokens).ok_or(ParseGpuPolicyError::Empty)
    }
}

impl fmt::Display for GpuPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.tokens.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(t.as_str())?;
        }
        Ok(())
    }
}

/// One key of the card visiting order; the last tie-breaks (lower index, then id) are implicit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SortKey {
    /// Higher device score first.
    ScoreDesc,
    /// Lower device score first.
    ScoreAsc,
    /// Higher NUMA id first.
    NumaDesc,
    /// Lower NUMA id first.
    NumaAsc,
    /// Idle cards (no slot used) first.
    IdleFirst,
    /// Smaller increase of the node's fragmentation first (section 12.3).
    FragAsc,
}

/// The resolved card visiting rules for a container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VisitPlan {
    /// Sort keys, most significant first.
    pub keys: Vec<SortKey>,
    /// Only idle cards are eligible.
    pub mutex: bool,
    /// Choose among all fitting cards by pair scores.
    pub topology: bool,
    /// Cards of a container must share a NUMA node.
    pub numa_bind: bool,
}

impl VisitPlan {
    /// Whether any key uses the fragmentation measure.
    #[inline]
    pub fn uses_fragmentation(&self) -> bool {
        self.keys.contains(&SortKey::FragAsc)
    }

    /// Whether any key uses the device score.
    #[inline]
    pub fn uses_score(&self) -> bool {
        self.keys
            .iter()
            .any(|k| matches!(k, SortKey::ScoreAsc | SortKey::ScoreDesc))
    }
}

/// A value of `nvidia.com/numa-bind` that is no boolean.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid boolean {value:?}; accepted: 1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False"
)]
pub struct ParseBoolError {
    /// The value given.
    pub value: String,
}

/// Parses `nvidia.com/numa-bind`: `1 t T TRUE true True` / `0 f F FALSE false False`.
pub(crate) fn parse_bool(value: &str) -> Result<bool, ParseBoolError> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        other => Err(ParseBoolError {
            value: other.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_dedupe_and_keep_order() {
        let p = str::parse::<GpuPolicy>(" numa , binpack,numa").unwrap();
        assert_eq!(p.tokens(), &[GpuToken::Numa, GpuToken::Binpack]);
        assert_eq!(p.to_string(), "numa,binpack");
        assert_eq!(
            str::parse::<GpuPolicy>("binpack,binpack").unwrap(),
            GpuPolicy::single(GpuToken::Binpack)
        );
    }

    #[test]
    fn invalid_policies_are_rejected() {
        for bad in [
            "",
            " ",
            "Spread",
            "pack",
            "binpack,,numa",
            "binpack,",
            ",binpack",
            "BINPACK",
        ] {
            assert!(
                str::parse::<GpuPolicy>(bad).is_err(),
                "{bad:?} must be rejected"
            );
        }
        assert_eq!(str::parse::<NodePolicy>(" fgd "), Ok(NodePolicy::Fgd));
        for bad in [
            "",
            "Binpack",
            "mutex",
            "binpack,spread",
            "FGD",
            "fgd,binpack",
        ] {
            assert!(
                str::parse::<NodePolicy>(bad).is_err(),
                "{bad:?} must be rejected"
            );
        }
    }

    #[test]
    fn visit_plans() {
        let plan = |s: &str, nb: bool| str::parse::<GpuPolicy>(s).unwrap().visit_plan(nb).keys;
        assert_eq!(
            plan("binpack", false),
            vec![SortKey::ScoreDesc, SortKey::NumaDesc]
        );
        assert_eq!(
            plan("binpack", true),
            vec![SortKey::NumaAsc, SortKey::ScoreDesc]
        );
        assert_eq!(
            plan("spread", true),
            vec![SortKey::NumaDesc, SortKey::ScoreAsc]
        );
        assert_eq!(plan("numa", false), vec![SortKey::NumaDesc]);
        assert_eq!(
            plan("binpack,numa", false),
            vec![SortKey::ScoreDesc, SortKey::NumaDesc]
        );
        assert_eq!(
            plan("binpack,numa", true),
            vec![SortKey::NumaDesc, SortKey::ScoreDesc]
        );
        assert_eq!(plan("mutex,topology-aware", false), vec![SortKey::ScoreAsc]);
        assert_eq!(
            plan("fgd", false),
            vec![SortKey::FragAsc, SortKey::ScoreDesc, SortKey::NumaDesc]
        );
        assert_eq!(
            plan("fgd", true),
            vec![SortKey::NumaAsc, SortKey::FragAsc, SortKey::ScoreDesc]
        );
        assert_eq!(
            plan("numa,fgd", false),
            vec![SortKey::NumaDesc, SortKey::FragAsc]
        );
        let p = str::parse::<GpuPolicy>("mutex,spread")
            .unwrap()
            .visit_plan(false);
        assert!(p.mutex && !p.topology);
        assert_eq!(p.keys, vec![SortKey::ScoreAsc]);
    }
}
