//! The dhcp plugin's `ipam` section (Go's keys, plus per-network timing)
//! and the daemon's command line (Go's flags, plus `-statedir`).

use std::path::PathBuf;
use std::time::Duration;

use cni_ipam::dhcp::options::{self, ProvideOption, RequestOption};
use cni_types::NetworkConfig;
use serde::{Deserialize, Deserializer};

use super::error::{Error, Result};
use cni_types::go_duration;

/// Where the daemon listens and the plugin dials by default (Go's).
pub const DEFAULT_SOCKET_PATH: &str = "/run/cni/dhcp.sock";
/// Where the daemon keeps its lease files by default: under `/run`, so
/// that they live exactly as long as the namespaces they refer to.
pub const DEFAULT_STATE_DIR: &str = "/run/cni/dhcp-leases";

/// The `ipam` section of a dhcp network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DhcpConfig {
    /// The daemon's socket (default [`DEFAULT_SOCKET_PATH`]).
    #[serde(default)]
    pub daemon_socket_path: String,
    /// Options for the parameter request list.
    #[serde(default)]
    pub request: Vec<RequestOption>,
    /// Options sent to the server.
    #[serde(default)]
    pub provide: Vec<ProvideOption>,
    /// Route metric set on every returned route (0: none).
    #[serde(default)]
    pub priority: u32,
    /// Per-reply wait, overriding the daemon's `-timeout`.
    #[serde(default, deserialize_with = "go_duration")]
    pub timeout: Option<Duration>,
    /// Back-off ceiling, overriding the daemon's `-resendmax`.
    #[serde(default, deserialize_with = "go_duration")]
    pub resend_max: Option<Duration>,
    /// Acquire deadline, overriding the daemon's `-resendtimeout`.
    #[serde(default, deserialize_with = "go_duration")]
    pub resend_timeout: Option<Duration>,
}

fn go_duration<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<Duration>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) if s.is_empty() => Ok(None),
        Some(s) => go_duration::parse(&s)
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom(format!("invalid duration {s:?}"))),
    }
}

impl DhcpConfig {
    /// The `ipam` section of `config`, with every option name checked (so
    /// that a typo fails the plugin before the daemon is asked).
    pub fn from_network_config(config: &NetworkConfig) -> Result<DhcpConfig> {
        let ipam = config.ipam.clone().ok_or(Error::IpamMissing)?;
        let c: DhcpConfig = cni_types::json::from_value_naming_key(serde_json::Value::Object(ipam))
            .map_err(|e| Error::IpamInvalid {
                reason: e.to_string(),
            })?;
        options::parameter_request_list(&c.request)?;
        options::provided_options(&c.provide, "")?;
        Ok(c)
    }

    /// The socket the plugin dials.
    pub fn socket_path(&self) -> PathBuf {
        if self.daemon_socket_path.is_empty() {
            PathBuf::from(DEFAULT_SOCKET_PATH)
        } else {
            PathBuf::from(&self.daemon_socket_path)
        }
    }
}

/// `dhcp daemon` flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DaemonOptions {
    /// `-socketpath` (the daemon listens on `hostprefix + socketpath`).
    pub socket_path: PathBuf,
    /// `-hostprefix`: prepended to the socket path and to every netns path.
    pub host_prefix: String,
    /// `-broadcast`: set the BOOTP broadcast flag.
    pub broadcast: bool,
    /// `-timeout`: per-reply wait (Go: 10s).
    pub timeout: Duration,
    /// `-resendmax`: back-off ceiling (Go: 62s).
    pub resend_max: Duration,
    /// `-resendtimeout`: acquire deadline (Go: 208s).
    pub resend_timeout: Duration,
    /// `-pidfile`: absolute path to write the pid to.
    pub pidfile: Option<PathBuf>,
    /// `-statedir`: where leases are persisted (ours).
    pub state_dir: PathBuf,
    /// Listening sockets passed by systemd socket activation
    /// (`LISTEN_FDS`, when `LISTEN_PID` is this process; the binary reads
    /// the environment): Go's `cni-dhcp.socket` unit works unchanged.
    pub activated_fds: u32,
}

impl Default for DaemonOptions {
    fn default() -> Self {
        DaemonOptions {
            socket_path: PathBuf::from(DEFAULT_SOCKET_PATH),
            host_prefix: String::new(),
            broadcast: false,
            timeout: Duration::from_secs(10),
            resend_max: Duration::from_secs(62),
            resend_timeout: Duration::from_secs(208),
            pidfile: None,
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            activated_fds: 0,
        }
    }
}

impl DaemonOptions {
    /// Parses the arguments after `daemon`, as Go's `flag` package does:
    /// `-x v`, `-x=v`, `--x` alike; booleans take a value only as `-x=v`.
    /// A bad command line is one of the `dhcp daemon` kinds of [`Error`]
    /// (its text is Go's `flag` package's).
    pub fn parse(args: &[String]) -> std::result::Result<DaemonOptions, Error> {
        let mut o = DaemonOptions::default();
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let flag = arg
                .strip_prefix("--")
                .or_else(|| arg.strip_prefix('-'))
                .ok_or_else(|| Error::UnexpectedArgument { arg: arg.clone() })?;
            let (name, inline) = match flag.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (flag, None),
            };
            if name == "broadcast" {
                o.broadcast = match inline.as_deref() {
                    None | Some("true" | "1" | "t" | "T" | "TRUE" | "True") => true,
                    Some("false" | "0" | "f" | "F" | "FALSE" | "False") => false,
                    Some(v) => {
                        return Err(Error::InvalidBoolean {
                            value: v.to_owned(),
                        })
                    }
                };
                continue;
            }
            const VALUED: [&str; 6] = [
                "socketpath",
                "hostprefix",
                "timeout",
                "resendmax",
                "resendtimeout",
                "pidfile",
            ];
            let undefined = || Error::UndefinedFlag {
                flag: name.to_owned(),
            };
            if !VALUED.contains(&name) && name != "statedir" {
                return Err(undefined());
            }
            let value = match inline {
                Some(v) => v,
                None => it.next().cloned().ok_or_else(|| Error::FlagWithoutValue {
                    flag: name.to_owned(),
                })?,
            };
            let duration = |v: &str| {
                go_duration::parse(v).ok_or_else(|| Error::InvalidDuration {
                    flag: name.to_owned(),
                    value: v.to_owned(),
                })
            };
            match name {
                "socketpath" if !value.is_empty() => o.socket_path = PathBuf::from(value),
                "socketpath" => {}
                "hostprefix" => o.host_prefix = value,
                "timeout" => o.timeout = duration(&value)?,
                "resendmax" => o.resend_max = duration(&value)?,
                "resendtimeout" => o.resend_timeout = duration(&value)?,
                "statedir" => o.state_dir = PathBuf::from(value),
                "pidfile" if value.is_empty() => {}
                "pidfile" if !value.starts_with('/') => {
                    return Err(Error::RelativePidfile { path: value })
                }
                "pidfile" => o.pidfile = Some(PathBuf::from(value)),
                _ => return Err(undefined()),
            }
        }
        Ok(o)
    }

    /// The socket path the daemon listens on (`hostprefix + socketpath`).
    pub fn listen_path(&self) -> PathBuf {
        PathBuf::from(format!(
            "{}{}",
            self.host_prefix,
            self.socket_path.display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PluginError;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn daemon_flags_go_syntax() {
        let o = DaemonOptions::parse(&args(&[
            "-socketpath",
            "/tmp/x.sock",
            "--timeout=2s",
            "-resendmax",
            "1m30s",
            "-broadcast",
            "-hostprefix=/host",
            "-statedir",
            "/tmp/s",
        ]))
        .unwrap();
        assert_eq!(o.listen_path(), PathBuf::from("/host/tmp/x.sock"));
        assert_eq!(
            (o.timeout, o.resend_max),
            (Duration::from_secs(2), Duration::from_secs(90))
        );
        assert!(o.broadcast);
        assert_eq!(o.state_dir, PathBuf::from("/tmp/s"));
        assert_eq!(DaemonOptions::parse(&[]).unwrap(), DaemonOptions::default());
        // Go's `flag` texts, each a kind of its own.
        let refused = |a: &[&str]| DaemonOptions::parse(&args(a)).unwrap_err();
        let e = refused(&["-nope"]);
        assert!(matches!(e, Error::UndefinedFlag { ref flag } if flag == "nope"));
        assert_eq!(e.to_string(), "flag provided but not defined: -nope");
        let e = refused(&["-timeout", "ten"]);
        assert!(matches!(e, Error::InvalidDuration { .. }));
        assert_eq!(e.to_string(), r#"invalid value "ten" for flag -timeout"#);
        let e = refused(&["-pidfile", "rel"]);
        assert_eq!(
            e.to_string(),
            r#"Error writing pidfile "rel": path not absolute"#
        );
        assert_eq!(
            refused(&["-broadcast=maybe"]).to_string(),
            r#"invalid boolean value "maybe" for -broadcast"#
        );
        assert_eq!(
            refused(&["-socketpath"]).to_string(),
            "flag needs an argument: -socketpath"
        );
        assert_eq!(
            refused(&["socketpath"]).to_string(),
            r#"unexpected argument "socketpath""#
        );
    }

    #[test]
    fn ipam_section() {
        let conf = |ipam: serde_json::Value| {
            let v = serde_json::json!({"cniVersion": "1.0.0", "name": "n", "type": "bridge", "ipam": ipam});
            DhcpConfig::from_network_config(
                &NetworkConfig::from_slice(v.to_string().as_bytes()).unwrap(),
            )
        };
        let c = conf(
            serde_json::json!({"type": "dhcp", "timeout": "2s", "request": [{"option": "121"}]}),
        )
        .unwrap();
        assert_eq!(
            (c.timeout, c.socket_path()),
            (
                Some(Duration::from_secs(2)),
                PathBuf::from(DEFAULT_SOCKET_PATH)
            )
        );
        let e = conf(serde_json::json!({"type": "dhcp", "request": [{"option": "static-routes"}]}))
            .unwrap_err();
        assert_eq!(e.code().as_u32(), 7);
        assert!(conf(serde_json::json!({"type": "dhcp", "resendMax": "x"})).is_err());
    }
}
