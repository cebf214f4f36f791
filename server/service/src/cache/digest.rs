//! Content addresses: the SHA-256 digest of a node part or of a node set (the only digest
//! function today), and which part of a node a digest addresses. A leaf: the caches, the
//! conversions and the error table all name parts by these.

use gpusched_api::v1;

/// Bytes hashed per reference in a set digest (inventory hash, usage hash).
const PER_REF: u64 = 64;

/// Which part of a node a digest addresses (the same bytes read as another part are another
/// entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    /// A serialized `gpusched.v1.Node`, converted and validated to an engine node (or to the
    /// verdict that it is invalid itself).
    Inventory,
    /// A serialized `gpusched.v1.NodeUsage`, converted to per-card usage.
    Usage,
}

impl Part {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Part::Inventory => "inventory",
            Part::Usage => "usage",
        }
    }
}

/// A SHA-256 content address (the only digest function today).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    /// The raw hash.
    pub hash: [u8; 32],
    /// Length of the blob.
    pub size_bytes: u64,
}

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        use sha2::Digest as _;
        Digest {
            hash: sha2::Sha256::digest(bytes).into(),
            size_bytes: bytes.len() as u64,
        }
    }

    /// The digest a set of these references is kept under (see `NodeSetRef` in types.proto), or
    /// `None` when a reference is malformed (the conversion reports it).
    pub fn of_set(refs: &[v1::NodeRef]) -> Option<Digest> {
        use sha2::Digest as _;
        let mut h = sha2::Sha256::new();
        let part = |bytes: &[u8], d: Option<&v1::Digest>, absent: [u8; 32]| -> Option<[u8; 32]> {
            match d {
                Some(d) => d.hash.as_slice().try_into().ok(),
                None if !bytes.is_empty() => Some(Digest::of(bytes).hash),
                None => Some(absent),
            }
        };
        for r in refs {
            // An inventory is required: neither bytes nor digest is malformed.
            let inv = if r.inventory.is_empty() && r.inventory_digest.is_none() {
                None
            } else {
                part(&r.inventory, r.inventory_digest.as_ref(), [0; 32])
            }?;
            let usage = part(&r.usage, r.usage_digest.as_ref(), [0; 32])?;
            h.update(inv);
            h.update(usage);
        }
        Some(Digest {
            hash: h.finalize().into(),
            size_bytes: PER_REF * refs.len() as u64,
        })
    }
}

impl std::fmt::Display for Digest {
    /// `sha256/<64 lowercase hex>/<size_bytes>`: the PreconditionFailure subject.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("sha256/")?;
        for b in self.hash {
            write!(f, "{b:02x}")?;
        }
        write!(f, "/{}", self.size_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subject_format() {
        let d = Digest::of(b"");
        assert_eq!(
            d.to_string(),
            "sha256/e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855/0"
        );
    }
}
