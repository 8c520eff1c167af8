//! `cni-install --to /opt/cni/bin [--from DIR] [--only a,b] [--skip-existing]`:
//! installs plugin binaries atomically (see [`cni_plugins::install`]). Prints
//! one line per binary: installed, unchanged or skipped.
#![allow(clippy::print_stdout)] // the report is the program's output

use std::io::Write;

use cni_plugins::install::{install, parse_args, USAGE};

fn main() {
    let own_dir = || {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.to_path_buf()))
    };
    let opts = match parse_args(std::env::args().skip(1), own_dir) {
        Ok(Some(opts)) => opts,
        Ok(None) => {
            println!("{USAGE}");
            return;
        }
        Err(e) => {
            eprintln!("cni-install: {e}");
            std::process::exit(2);
        }
    };
    match install(&opts) {
        Ok(changes) => {
            let mut out = std::io::stdout().lock();
            for c in changes {
                let _ = writeln!(out, "{c}");
            }
        }
        Err(e) => {
            eprintln!("cni-install: {e}");
            std::process::exit(1);
        }
    }
}
