//! The plugin runner's whole protocol (`cni_exec::dispatch`): an arbitrary
//! environment and stdin, with a trivial plugin that reads what a real one
//! reads (`CNI_ARGS`, `prevResult`, the GC valid list). Whatever comes in,
//! the runner must answer exit 0 with a parsable reply, or exit 1 with one
//! CNI error JSON, and never report a panic.
#![no_main]

use arbitrary::Arbitrary;
use cni_exec::{dispatch, Env, Plugin, Request};
use cni_types::{CniError, CniResult, IpConfig, Version};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

#[derive(Arbitrary, Debug)]
enum Command {
    Add,
    Del,
    Check,
    Gc,
    Status,
    Version,
    Unset,
    Other(String),
}

#[derive(Arbitrary, Debug)]
enum VarName {
    ContainerId,
    Netns,
    Ifname,
    Args,
    Path,
    NetnsOverride,
    Other(String),
}

#[derive(Arbitrary, Debug)]
enum ConfVersion {
    Known(u8),
    Missing,
    Text(String),
    NotAString(i64),
}

#[derive(Arbitrary, Debug)]
enum Stdin {
    /// Bytes as they come.
    Raw(Vec<u8>),
    /// A config object with fuzzed parts, to get past the JSON decoder.
    Shaped {
        version: ConfVersion,
        name: String,
        /// Parsed as JSON if it is JSON, else passed as a string.
        prev_result: Option<String>,
        runtime_config: Option<String>,
        args: Option<String>,
        extra: Vec<(String, String)>,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    command: Command,
    /// Most runs want the required variables set to something valid.
    defaults: bool,
    vars: Vec<(VarName, String)>,
    stdin: Stdin,
}

fn json_or_string(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.to_string()))
}

fn stdin_bytes(stdin: &Stdin) -> Vec<u8> {
    match stdin {
        Stdin::Raw(b) => b.clone(),
        Stdin::Shaped {
            version,
            name,
            prev_result,
            runtime_config,
            args,
            extra,
        } => {
            let mut m = Map::new();
            match version {
                ConfVersion::Known(i) => {
                    let v = Version::ALL[usize::from(*i) % Version::ALL.len()];
                    m.insert("cniVersion".into(), Value::from(v.to_string()));
                }
                ConfVersion::Missing => {}
                ConfVersion::Text(s) => {
                    m.insert("cniVersion".into(), Value::from(s.clone()));
                }
                ConfVersion::NotAString(n) => {
                    m.insert("cniVersion".into(), Value::from(*n));
                }
            }
            m.insert("name".into(), Value::from(name.clone()));
            m.insert("type".into(), Value::from("fuzz"));
            for (key, value) in [
                ("prevResult", prev_result),
                ("runtimeConfig", runtime_config),
                ("args", args),
            ] {
                if let Some(v) = value {
                    m.insert(key.into(), json_or_string(v));
                }
            }
            for (k, v) in extra {
                m.insert(k.clone(), json_or_string(v));
            }
            serde_json::to_vec(&Value::Object(m)).unwrap_or_default()
        }
    }
}

struct Trivial;

impl Plugin for Trivial {
    type Error = cni_types::CniError;
    fn name(&self) -> &str {
        "trivial"
    }
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        if let Some(prev) = req.config.prev_result().map_err(|e| e.to_cni_error())? {
            return Ok(prev);
        }
        let args = req.args().map_err(|e| e.to_cni_error())?;
        let ip = args
            .get_parsed::<std::net::IpAddr>("IP")
            .map_err(|e| e.to_cni_error())?
            .unwrap_or(std::net::IpAddr::from([10, 1, 0, 5]));
        let prefix = if ip.is_ipv4() { 24 } else { 64 };
        let net =
            ipnetwork::IpNetwork::new(ip, prefix).map_err(|e| CniError::internal(e.to_string()))?;
        let mut r = CniResult::default();
        r.ips.push(IpConfig::new(net));
        Ok(r)
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        req.config.prev_result().map_err(|e| e.to_cni_error())?;
        Ok(())
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        req.config.prev_result().map_err(|e| e.to_cni_error())?;
        req.args().map_err(|e| e.to_cni_error())?;
        Ok(())
    }

    fn gc(&self, req: &Request) -> Result<(), CniError> {
        req.config
            .valid_attachments()
            .map_err(|e| e.to_cni_error())?;
        Ok(())
    }
}

fuzz_target!(|input: Input| {
    let mut env = Env::new(Vec::<(String, String)>::new());
    if input.defaults {
        for (k, v) in [
            ("CNI_CONTAINERID", "c1"),
            ("CNI_NETNS", "/run/netns/fuzz"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/nonexistent"),
        ] {
            env.set(k, v);
        }
    }
    match &input.command {
        Command::Add => env.set("CNI_COMMAND", "ADD"),
        Command::Del => env.set("CNI_COMMAND", "DEL"),
        Command::Check => env.set("CNI_COMMAND", "CHECK"),
        Command::Gc => env.set("CNI_COMMAND", "GC"),
        Command::Status => env.set("CNI_COMMAND", "STATUS"),
        Command::Version => env.set("CNI_COMMAND", "VERSION"),
        Command::Unset => {}
        Command::Other(s) => env.set("CNI_COMMAND", s.clone()),
    }
    for (name, value) in &input.vars {
        let key = match name {
            VarName::ContainerId => "CNI_CONTAINERID".to_string(),
            VarName::Netns => "CNI_NETNS".into(),
            VarName::Ifname => "CNI_IFNAME".into(),
            VarName::Args => "CNI_ARGS".into(),
            VarName::Path => "CNI_PATH".into(),
            VarName::NetnsOverride => "CNI_NETNS_OVERRIDE".into(),
            VarName::Other(s) => s.clone(),
        };
        env.set(key, value.clone());
    }
    let stdin = stdin_bytes(&input.stdin);
    let out = dispatch(&Trivial, &env, &stdin);
    match out.exit_code {
        0 => {
            if matches!(input.command, Command::Add) && !out.stdout.is_empty() {
                let v: Value =
                    serde_json::from_slice(&out.stdout).expect("ADD printed a non-JSON result");
                CniResult::from_value(&v, Version::V0_1_0)
                    .expect("ADD printed an unparsable result");
            }
        }
        1 => {
            let e: CniError =
                serde_json::from_slice(&out.stdout).expect("an error reply must be CNI error JSON");
            assert_ne!(e.code.as_u32(), 0, "error reply with code 0");
            // The runner's own words for a caught panic (cni_exec::skel and
            // cni_exec::process) start the message; the input's bytes may
            // contain the word anywhere else.
            assert!(
                !e.msg.starts_with("plugin panicked")
                    && !e.msg.starts_with("plugin runner panicked"),
                "the runner caught a panic: {}",
                e.msg
            );
        }
        other => panic!("exit code {other}"),
    }
});
