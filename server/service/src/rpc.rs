//! The RPCs this server answers, once: their gRPC paths, services and method names (the
//! metrics and span labels), the labels of the other paths (health, reflection), the
//! `grpc-timeout` header, and what the transport learned about a call for its handler
//! ([`Admission`]).

use std::time::Duration;

use tonic::metadata::MetadataMap;

/// The unary RPCs of `PlacementService` and `InventoryService` (health and reflection are
/// tonic's own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rpc {
    /// `PlacementService/Filter`.
    Filter,
    /// `PlacementService/Score`.
    Score,
    /// `PlacementService/Allocate`.
    Allocate,
    /// `PlacementService/AllocateBatch`.
    AllocateBatch,
    /// `PlacementService/ValidateWorkload`.
    ValidateWorkload,
    /// `InventoryService/NormalizeInventory`.
    NormalizeInventory,
    /// `PlacementService/Preempt`.
    Preempt,
}

/// One row of the table: the RPC, its service, its method and its path.
type Row = (Rpc, &'static str, &'static str, &'static str);

/// Writes the table once: the path is the service and the method joined.
macro_rules! table {
    ($($rpc:ident: $service:literal / $method:literal),* $(,)?) => {
        const TABLE: [Row; 7] = [$((
            Rpc::$rpc,
            $service,
            $method,
            concat!("/", $service, "/", $method),
        )),*];
    };
}

table! {
    Filter: "gpusched.v1.PlacementService" / "Filter",
    Score: "gpusched.v1.PlacementService" / "Score",
    Allocate: "gpusched.v1.PlacementService" / "Allocate",
    AllocateBatch: "gpusched.v1.PlacementService" / "AllocateBatch",
    ValidateWorkload: "gpusched.v1.PlacementService" / "ValidateWorkload",
    NormalizeInventory: "gpusched.v1.InventoryService" / "NormalizeInventory",
    Preempt: "gpusched.v1.PlacementService" / "Preempt",
}

/// Labels of the paths tonic serves itself (health, reflection v1 and v1alpha).
const OTHER_LABELS: [(&str, &str); 4] = [
    ("/grpc.health.v1.Health/Check", "Check"),
    ("/grpc.health.v1.Health/Watch", "Watch"),
    (
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        "ServerReflectionInfo",
    ),
    (
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        "ServerReflectionInfo",
    ),
];

impl Rpc {
    /// Every RPC, in table order.
    pub const ALL: [Rpc; 7] = [
        Rpc::Filter,
        Rpc::Score,
        Rpc::Allocate,
        Rpc::AllocateBatch,
        Rpc::ValidateWorkload,
        Rpc::NormalizeInventory,
        Rpc::Preempt,
    ];

    fn row(self) -> &'static Row {
        // The table holds every variant, in declaration order.
        &TABLE[self as usize]
    }

    /// The full gRPC service name (`gpusched.v1.PlacementService`).
    pub fn service(self) -> &'static str {
        self.row().1
    }

    /// The method name (`Allocate`): the `rpc` label of metrics and spans.
    pub fn method(self) -> &'static str {
        self.row().2
    }

    /// The HTTP/2 path (`/gpusched.v1.PlacementService/Allocate`).
    pub fn path(self) -> &'static str {
        self.row().3
    }

    /// The RPC of an HTTP/2 request path.
    pub fn from_path(path: &str) -> Option<Rpc> {
        TABLE.iter().find(|r| r.3 == path).map(|r| r.0)
    }

    /// Whether it is a `PlacementService` RPC.
    pub fn is_placement(self) -> bool {
        !matches!(self, Rpc::NormalizeInventory)
    }
}

/// The `rpc` label of a request path: the method of a known RPC, health's and reflection's
/// names, `unknown` for anything else (the label's values stay a closed set whatever clients
/// send).
pub fn label(path: &str) -> &'static str {
    match Rpc::from_path(path) {
        Some(rpc) => rpc.method(),
        None => OTHER_LABELS
            .iter()
            .find(|(p, _)| *p == path)
            .map_or("unknown", |(_, label)| label),
    }
}

/// Parses a `grpc-timeout` header value (`<digits><H|M|S|m|u|n>`).
pub fn grpc_timeout(metadata: &MetadataMap) -> Option<Duration> {
    let v = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// What counting a request on the wire found (`transport::prescan`): the estimates it is
/// admitted with, handed to its handler as a request extension.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Admission {
    /// Estimated peak memory of the call, bytes: the encoded request, the decoded and
    /// converted structures, and the answer (see `transport::prescan::cost`).
    pub memory: usize,
    /// Estimated work, in card evaluations: cards x (containers + 1) x workloads (twice with
    /// explanations), plus one per counted entry (conversion) and per card and filter entry.
    pub work: usize,
    /// The call already runs on the blocking pool (a large message, see `transport::intake`):
    /// its decision runs there inline.
    pub offloaded: bool,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use prost::Message as _;

    #[test]
    fn the_table_is_the_services_of_the_descriptors() {
        let set =
            prost_types::FileDescriptorSet::decode(gpusched_api::FILE_DESCRIPTOR_SET).unwrap();
        let mut described = Vec::new();
        for f in &set.file {
            for s in &f.service {
                let service = format!("{}.{}", f.package(), s.name());
                for m in &s.method {
                    described.push(format!("/{service}/{}", m.name()));
                }
            }
        }
        described.sort();
        let mut ours: Vec<String> = Rpc::ALL.iter().map(|r| r.path().to_owned()).collect();
        ours.sort();
        assert_eq!(ours, described);
        for (i, rpc) in Rpc::ALL.into_iter().enumerate() {
            assert_eq!(TABLE[i].0, rpc);
            assert_eq!(rpc.path(), format!("/{}/{}", rpc.service(), rpc.method()));
            assert_eq!(Rpc::from_path(rpc.path()), Some(rpc));
            assert_eq!(label(rpc.path()), rpc.method());
        }
        assert!(Rpc::ALL.iter().all(|r| {
            let service = if r.is_placement() {
                "gpusched.v1.PlacementService"
            } else {
                "gpusched.v1.InventoryService"
            };
            r.service() == service
        }));
    }

    #[test]
    fn labels_are_a_closed_set() {
        assert_eq!(label("/gpusched.v1.PlacementService/Allocate"), "Allocate");
        assert_eq!(label("/grpc.health.v1.Health/Check"), "Check");
        assert_eq!(label("/x/y"), "unknown");
        assert_eq!(label(&"/a".repeat(1000)), "unknown");
    }

    #[test]
    fn the_paths_are_the_services_rpcs() {
        // The service names and methods as generated (a renamed RPC must be renamed here).
        use gpusched_api::v1::inventory_service_server::SERVICE_NAME as INVENTORY;
        use gpusched_api::v1::placement_service_server::SERVICE_NAME as PLACEMENT;
        for (m, rpc) in [
            ("Filter", Rpc::Filter),
            ("Score", Rpc::Score),
            ("Allocate", Rpc::Allocate),
            ("AllocateBatch", Rpc::AllocateBatch),
            ("ValidateWorkload", Rpc::ValidateWorkload),
        ] {
            assert_eq!(Rpc::from_path(&format!("/{PLACEMENT}/{m}")), Some(rpc));
        }
        assert_eq!(
            Rpc::from_path(&format!("/{INVENTORY}/NormalizeInventory")),
            Some(Rpc::NormalizeInventory)
        );
        assert_eq!(Rpc::from_path("/grpc.health.v1.Health/Check"), None);
    }

    #[test]
    fn grpc_timeouts_parse() {
        // The caller's grpc-timeout is read from the metadata (the shorter of the two applies).
        let mut md = tonic::metadata::MetadataMap::new();
        md.insert("grpc-timeout", "250m".parse().unwrap());
        assert_eq!(grpc_timeout(&md), Some(Duration::from_millis(250)));
        md.insert("grpc-timeout", "3S".parse().unwrap());
        assert_eq!(grpc_timeout(&md), Some(Duration::from_secs(3)));
        md.insert("grpc-timeout", "x".parse().unwrap());
        assert_eq!(grpc_timeout(&md), None);
    }
}
