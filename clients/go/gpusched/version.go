package gpusched

// Version is the gpusched release this client belongs to (the workspace version in the
// repository's Cargo.toml; scripts/version.sh --check keeps them equal). The Go module itself
// is published under the tag clients/go/vVersion.
const Version = "0.1.0"
