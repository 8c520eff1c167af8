//! Validation of names that come from the runtime: network names, container
//! ids and interface names, with the Go reference's rules, messages and
//! codes (`pkg/utils/utils.go`).

use crate::{Error, ErrorCode};

/// `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`, the reference's rule for network names
/// and container ids.
fn valid_id(s: &str) -> bool {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphanumeric() => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

fn invalid(code: ErrorCode, msg: &str, details: &str) -> Error {
    Error::InvalidName {
        code,
        msg: msg.into(),
        details: details.into(),
    }
}

/// A network name: required (code 7 "missing network name"), and made of
/// `[a-zA-Z0-9][a-zA-Z0-9_.-]*` (code 7). Such a name cannot contain `/`
/// and is never `.` or `..`, so it is safe as a path component.
pub fn network_name(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(invalid(
            ErrorCode::InvalidNetworkConfig,
            "missing network name",
            "",
        ));
    }
    if !valid_id(name) {
        return Err(invalid(
            ErrorCode::InvalidNetworkConfig,
            "invalid characters found in network name",
            name,
        ));
    }
    Ok(())
}

/// A container id: required (code 3 "missing containerID", as libcni) and
/// made of the same characters as a network name (code 4).
pub fn container_id(id: &str) -> Result<(), Error> {
    if id.is_empty() {
        return Err(invalid(
            ErrorCode::UnknownContainer,
            "missing containerID",
            "",
        ));
    }
    if !valid_id(id) {
        return Err(invalid(
            ErrorCode::InvalidEnvironmentVariables,
            "invalid characters in containerID",
            id,
        ));
    }
    Ok(())
}

/// An interface name: 1 to 15 bytes, not `.` or `..`, without `/`, `:` or
/// whitespace (code 4).
pub fn interface_name(name: &str) -> Result<(), Error> {
    let code = ErrorCode::InvalidEnvironmentVariables;
    if name.is_empty() {
        return Err(invalid(code, "interface name is empty", ""));
    }
    if name.len() > 15 {
        return Err(invalid(
            code,
            "interface name is too long",
            "interface name should be less than 16 characters",
        ));
    }
    if name == "." || name == ".." {
        return Err(invalid(code, "interface name is . or ..", ""));
    }
    if name
        .chars()
        .any(|c| c == '/' || c == ':' || c.is_whitespace())
    {
        return Err(invalid(
            code,
            "interface name contains / or : or whitespace characters",
            "",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(network_name("my-net.1_a").is_ok());
        assert_eq!(
            network_name("my net").unwrap_err().to_string(),
            "invalid characters found in network name"
        );
        assert_eq!(
            network_name("").unwrap_err().code(),
            ErrorCode::InvalidNetworkConfig
        );
        assert!(network_name("../x").is_err());
        assert!(network_name(".hidden").is_err());
    }

    #[test]
    fn container_ids() {
        assert!(container_id("abc123").is_ok());
        assert_eq!(
            container_id("").unwrap_err().code(),
            ErrorCode::UnknownContainer
        );
        assert_eq!(
            container_id("a/b").unwrap_err().code(),
            ErrorCode::InvalidEnvironmentVariables
        );
    }

    #[test]
    fn ifnames() {
        assert!(interface_name("eth0").is_ok());
        assert!(interface_name("eth0.100").is_ok());
        assert_eq!(
            interface_name("eth0:1").unwrap_err().to_string(),
            "interface name contains / or : or whitespace characters"
        );
        assert!(interface_name("a/b").is_err());
        assert!(interface_name("0123456789abcdef").is_err());
        assert!(interface_name("0123456789abcde").is_ok());
        assert!(interface_name("..").is_err());
        assert!(interface_name("").is_err());
        assert!(interface_name("a b").is_err());
    }
}
