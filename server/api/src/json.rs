//! Canonical proto3 JSON for the v1 messages (through prost-reflect and the descriptor set).

use std::sync::OnceLock;

use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, ReflectMessage, SerializeOptions};

/// A JSON conversion failure.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    /// The embedded descriptor set could not be read.
    #[error("descriptor set: {0}")]
    Descriptor(String),
    /// The message type is not part of the v1 API.
    #[error("unknown message type {0}")]
    UnknownType(String),
    /// The JSON does not match the message type.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// The protobuf bytes could not be decoded.
    #[error("{0}")]
    Decode(#[from] prost::DecodeError),
}

fn pool() -> Result<&'static DescriptorPool, JsonError> {
    static POOL: OnceLock<Result<DescriptorPool, String>> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(crate::FILE_DESCRIPTOR_SET).map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| JsonError::Descriptor(e.clone()))
}

fn descriptor(full_name: &str) -> Result<prost_reflect::MessageDescriptor, JsonError> {
    pool()?
        .get_message_by_name(full_name)
        .ok_or_else(|| JsonError::UnknownType(full_name.to_owned()))
}

/// Parses canonical proto3 JSON (lowerCamelCase or original field names) into `M`, whose full
/// protobuf name is `full_name` (e.g. `gpusched.v1.AllocateRequest`).
pub fn from_json<M: Message + Default>(full_name: &str, json: &str) -> Result<M, JsonError> {
    let desc = descriptor(full_name)?;
    let mut de = serde_json::Deserializer::from_str(json);
    let dynamic = DynamicMessage::deserialize(desc, &mut de)?;
    de.end()?;
    Ok(M::decode(dynamic.encode_to_vec().as_slice())?)
}

/// Writes `msg` (full protobuf name `full_name`) as canonical proto3 JSON: lowerCamelCase
/// names, default values omitted, 64-bit integers as strings, enums by name.
pub fn to_json<M: Message>(full_name: &str, msg: &M, pretty: bool) -> Result<String, JsonError> {
    let desc = descriptor(full_name)?;
    let dynamic = DynamicMessage::decode(desc, msg.encode_to_vec().as_slice())?;
    let options = SerializeOptions::new();
    let mut out = Vec::new();
    if pretty {
        let mut ser = serde_json::Serializer::pretty(&mut out);
        dynamic.serialize_with_options(&mut ser, &options)?;
    } else {
        let mut ser = serde_json::Serializer::new(&mut out);
        dynamic.serialize_with_options(&mut ser, &options)?;
    }
    String::from_utf8(out).map_err(|e| JsonError::Descriptor(e.to_string()))
}

/// The full name of a dynamic message's type (for tools that pick types by RPC).
pub fn type_name(msg: &DynamicMessage) -> String {
    msg.descriptor().full_name().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1;

    #[test]
    fn round_trip() {
        let req: v1::ValidateWorkloadRequest = from_json(
            "gpusched.v1.ValidateWorkloadRequest",
            r#"{"workload":{"name":"p","kubernetes":{"annotations":{"a":"b"},"containers":[{"limits":{"nvidia.com/gpu":"1"}}]}},"options":{"defaultMemoryMib":"5"}}"#,
        )
        .unwrap();
        assert_eq!(
            req.options.as_ref().and_then(|o| o.default_memory_mib),
            Some(5)
        );
        let json = to_json("gpusched.v1.ValidateWorkloadRequest", &req, false).unwrap();
        assert!(json.contains(r#""defaultMemoryMib":"5""#), "{json}");
        assert!(
            from_json::<v1::ValidateWorkloadRequest>(
                "gpusched.v1.ValidateWorkloadRequest",
                "{\"bogus\":1}"
            )
            .is_err()
        );
    }
}
