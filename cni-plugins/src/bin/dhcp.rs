//! The `dhcp` IPAM plugin binary; `dhcp daemon [flags]` runs the lease
//! daemon instead (Go's two modes in one binary).

cni_plugins::plugin_main!(@marker "dhcp");

fn main() {
    std::hint::black_box(&CNI_RS_PLUGIN_MARKER);
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) != Some("daemon") {
        cni_exec::run(&cni_plugins::dhcp::Dhcp);
    }
    let opts = match cni_plugins::dhcp::config::DaemonOptions::parse(&args[1..]) {
        Ok(mut o) => {
            // systemd socket activation, as Go's daemon (activation.Listeners).
            let ours = std::env::var("LISTEN_PID").ok() == Some(std::process::id().to_string());
            if ours {
                o.activated_fds = std::env::var("LISTEN_FDS")
                    .ok()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
            }
            o
        }
        Err(e) => {
            eprintln!("dhcp daemon: {e}");
            eprintln!("usage: dhcp daemon [-socketpath PATH] [-hostprefix PATH] [-broadcast] [-timeout DUR] [-resendmax DUR] [-resendtimeout DUR] [-pidfile PATH] [-statedir DIR]");
            std::process::exit(2);
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .init();
    if let Err(e) = cni_plugins::dhcp::daemon::run(opts) {
        eprintln!("dhcp daemon: {e}");
        std::process::exit(1);
    }
}
