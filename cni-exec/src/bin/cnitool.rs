//! `cnitool`: runs a network config against a network namespace, with
//! upstream cnitool's interface.
//!
//! ```text
//! cnitool [-i IFNAME] [--trace] add|check|del|status|gc <network-name> <netns-path>
//! ```
//!
//! `--trace` (ours, not upstream's): after the result, the call's span tree
//! with durations on stderr. cnitool records its own spans and points the
//! plugins' exporter (`OTEL_EXPORTER_OTLP_ENDPOINT`) at a receiver of its
//! own on 127.0.0.1.
//!
//! Environment: `NETCONFPATH` (default `/etc/cni/net.d`), `CNI_PATH`,
//! `CNI_IFNAME` (default `eth0`), `CNI_ARGS` (`K=V;K=V`), `CAP_ARGS` (JSON
//! object of capability data), `CNI_CONTAINERID` (default
//! `cnitool-<sha512(netns path)[..10] hex>`), `CNI_CACHEDIR` (default
//! `/var/lib/cni`), `CNI_TIMEOUT` (seconds; kills a plugin running longer).

use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use cni_exec::{CniConfig, ProcessExec, RuntimeConf};
use sha2::{Digest, Sha512};

const USAGE: &str = "CNI Tool is a simple program that executes a CNI configuration.
It will add, check, remove, gc, or get status of an interface in an already-created network namespace.

Usage:
  cnitool [-i IFNAME] [--trace] add|check|del|status|gc <network-name> <netns>

Flags:
  -h, --help            help for cnitool
  -i, --ifname string   Interface name (defaults to env var CNI_IFNAME or 'eth0')
      --trace           print the call's span tree with durations to stderr after the result

Environment: NETCONFPATH, CNI_PATH, CNI_IFNAME, CNI_ARGS, CAP_ARGS, CNI_CONTAINERID, CNI_CACHEDIR, CNI_TIMEOUT
";

fn env(key: &str) -> String {
    std::env::var(key).unwrap_or_default()
}

/// Go's `filepath.Abs`: joined with the working directory and cleaned
/// lexically (symlinks are not resolved).
fn abs(p: &str) -> Result<PathBuf, String> {
    let joined = if Path::new(p).is_absolute() {
        PathBuf::from(p)
    } else {
        std::env::current_dir()
            .map_err(|e| format!("get working directory: {e}"))?
            .join(p)
    };
    let mut out = PathBuf::from("/");
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(s) => out.push(s),
            _ => {}
        }
    }
    Ok(out)
}

/// upstream cnitool's `parseArgs`: every pair needs a key and a value.
fn parse_args(s: &str) -> Result<Vec<(String, String)>, String> {
    s.split(';')
        .map(|pair| {
            let kv: Vec<&str> = pair.split('=').collect();
            if kv.len() != 2 || kv[0].is_empty() || kv[1].is_empty() {
                Err(format!("invalid CNI_ARGS pair {pair:?}"))
            } else {
                Ok((kv[0].to_string(), kv[1].to_string()))
            }
        })
        .collect()
}

/// `--trace`: a receiver for every span of the call, cnitool's own
/// recorder, and the root span `cnitool <COMMAND>`.
struct Tracing {
    receiver: cni_trace::receiver::Receiver,
    exporter: cni_trace::Exporter,
    root: tracing::Span,
}

impl Tracing {
    fn start(cmd: &str) -> Result<Tracing, String> {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::Layer;

        let receiver = cni_trace::receiver::Receiver::start().map_err(|e| e.to_string())?;
        // The plugins export to it (their config's `otlp` key still wins).
        // Set before any plugin runs; the receiver's thread reads no
        // environment.
        for var in [
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_SDK_DISABLED",
            "OTEL_TRACES_EXPORTER",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        ] {
            std::env::remove_var(var);
        }
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint());
        let config = cni_trace::ExportConfig::resolve(
            |k| std::env::var(k).ok(),
            &cni_trace::Overrides::default(),
            "cnitool",
        )
        .map_err(|e| e.to_string())?
        .ok_or("--trace: no exporter")?;
        let (layer, exporter) = cni_trace::layer(config);
        tracing::subscriber::set_global_default(
            tracing_subscriber::registry().with(layer.with_filter(cni_trace::default_filter())),
        )
        .map_err(|e| e.to_string())?;
        let root = tracing::info_span!(
            "cnitool",
            otel.name = %format_args!("cnitool {}", cmd.to_uppercase()),
            otel.kind = "client",
        );
        if let Some(parent) = cni_exec::TraceContext::from_process_env() {
            cni_trace::set_remote_parent(&root, &parent);
        }
        Ok(Tracing {
            receiver,
            exporter,
            root,
        })
    }

    /// Sends cnitool's spans to the receiver and prints the tree.
    fn finish(self) {
        let trace_id = cni_trace::context_of(&self.root).map(|c| c.trace_id());
        drop(self.root);
        if let Err(e) = self.exporter.flush() {
            let _ = writeln!(std::io::stderr(), "trace: {e}");
        }
        let spans: Vec<_> = self
            .receiver
            .spans()
            .into_iter()
            .filter(|s| Some(s.trace_id) == trace_id)
            .collect();
        let tree = cni_trace::receiver::render_tree(&spans);
        let _ = write!(std::io::stderr(), "{tree}");
    }
}

fn run() -> Result<(), String> {
    let mut ifname = String::new();
    let mut trace = false;
    let mut positional = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "-h" | "--help" | "help" => {
                let _ = std::io::stdout().write_all(USAGE.as_bytes());
                return Ok(());
            }
            "-i" | "--ifname" => ifname = args.next().ok_or("flag needs an argument: -i")?,
            s if s.starts_with("--ifname=") => ifname = s["--ifname=".len()..].to_string(),
            "--trace" => trace = true,
            _ => positional.push(a),
        }
    }
    let [cmd, net_name, netns, ..] = positional.as_slice() else {
        return Err(format!(
            "network name and namespace are required\n\n{USAGE}"
        ));
    };
    if !matches!(cmd.as_str(), "add" | "check" | "del" | "status" | "gc") {
        return Err(format!("unknown command {cmd:?}\n\n{USAGE}"));
    }

    let netdir = Some(env("NETCONFPATH"))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "/etc/cni/net.d".into());
    let list = cni_exec::conf::load_network_conf(Path::new(&netdir), net_name)
        .map_err(|e| e.to_string())?;

    let cap_args = env("CAP_ARGS");
    let capability_args = if cap_args.is_empty() {
        Default::default()
    } else {
        serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&cap_args)
            .map_err(|e| format!("CAP_ARGS: {e}"))?
    };
    let cni_args = env("CNI_ARGS");
    let args = if cni_args.is_empty() {
        Vec::new()
    } else {
        parse_args(&cni_args)?
    };
    if ifname.is_empty() {
        ifname = Some(env("CNI_IFNAME"))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "eth0".into());
    }
    let netns = abs(netns)?.to_string_lossy().into_owned();
    let container_id = match env("CNI_CONTAINERID") {
        id if !id.is_empty() => id,
        _ => {
            let digest = Sha512::digest(netns.as_bytes());
            let hex: String = digest[..10].iter().map(|b| format!("{b:02x}")).collect();
            format!("cnitool-{hex}")
        }
    };
    let rt = RuntimeConf {
        container_id,
        netns,
        ifname,
        args,
        capability_args,
    };

    let mut exec = ProcessExec::new();
    if let Ok(secs) = env("CNI_TIMEOUT").parse::<u64>() {
        exec = exec.with_timeout(Duration::from_secs(secs));
    }
    let mut cni = CniConfig::new(cni_exec::skel::split_path(&env("CNI_PATH")), Arc::new(exec));
    let cache_dir = env("CNI_CACHEDIR");
    if !cache_dir.is_empty() {
        cni = cni.with_cache_dir(cache_dir);
    }
    let tracing = if trace {
        Some(Tracing::start(cmd)?)
    } else {
        // The caller's trace context (libcni's TRACEPARENT, TRACESTATE,
        // BAGGAGE) goes to every plugin; an invalid one is ignored.
        if let Some(ctx) = cni_exec::TraceContext::from_process_env() {
            cni = cni.with_trace_context(ctx);
        }
        None
    };
    let entered = tracing.as_ref().map(|t| t.root.clone().entered());
    let outcome = run_command(cmd, &cni, &list, &rt);
    drop(entered);
    if let Some(t) = tracing {
        t.finish();
    }
    outcome
}

fn run_command(
    cmd: &str,
    cni: &CniConfig,
    list: &cni_types::NetworkConfigList,
    rt: &RuntimeConf,
) -> Result<(), String> {
    let outcome = match cmd {
        "add" => {
            let result = cni.add_network_list(list, rt).map_err(|e| e.to_string())?;
            let json = result.to_json_pretty().map_err(|e| e.to_string())?;
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(&json);
            let _ = out.flush();
            Ok(())
        }
        "check" => cni.check_network_list(list, rt),
        "del" => cni.del_network_list(list, rt),
        "status" => cni.status_network_list(list),
        // Upstream cnitool GCs "without args, hence all network interface
        // should be GC'ed": every cached attachment of the network is
        // deleted. Said explicitly here with an empty list of valid
        // attachments, as plugins refuse a GC without a list.
        _ => cni.gc_network_list(list, Some(&[])),
    };
    outcome.map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "Error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_pairs() {
        assert_eq!(
            parse_args("A=b;C=d").unwrap(),
            vec![("A".to_string(), "b".to_string()), ("C".into(), "d".into())]
        );
        assert_eq!(
            parse_args("A=").unwrap_err(),
            "invalid CNI_ARGS pair \"A=\""
        );
        assert!(parse_args("A=b=c").is_err());
    }

    #[test]
    fn abs_is_lexical() {
        assert_eq!(
            abs("/run/netns/../netns/x").unwrap(),
            PathBuf::from("/run/netns/x")
        );
        assert_eq!(abs("/a/./b/").unwrap(), PathBuf::from("/a/b"));
        assert!(abs("rel").unwrap().is_absolute());
    }
}
