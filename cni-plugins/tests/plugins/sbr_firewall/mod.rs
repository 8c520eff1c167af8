//! Root integration tests of the sbr and firewall meta-plugins: real
//! namespaces, real rules, real traffic, and differential runs against the
//! Go reference plugins in /usr/lib/cni.

mod firewall;
mod sbr;

use std::process::{Command, Output};

use serde_json::Value;

/// One plugin invocation.
pub(crate) fn plugin_cmd(
    bin: &str,
    command: &str,
    netns: &str,
    ifname: &str,
    container_id: &str,
) -> Command {
    let mut c = Command::new(bin);
    c.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", container_id)
        .env("CNI_NETNS", netns)
        .env("CNI_IFNAME", ifname)
        .env("CNI_PATH", "/usr/lib/cni");
    c
}

/// Runs `cmd` with `stdin` on the calling thread's namespace.
pub(crate) fn run(mut cmd: Command, stdin: &str) -> Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn plugin");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("wait plugin")
}

/// The reply JSON of a plugin run; `Err` is the error reply.
pub(crate) fn reply(out: &Output) -> Result<Value, Value> {
    if out.status.success() && out.stdout.is_empty() {
        return Ok(Value::Null);
    }
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "plugin printed no JSON ({e}): stdout {:?} stderr {:?}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    if out.status.success() {
        Ok(v)
    } else {
        Err(v)
    }
}

/// A result as compared between Go and us: Go prints `"dns": {}` for an
/// empty DNS section, we leave it out.
pub(crate) fn normalized(mut v: Value) -> Value {
    if v.get("dns")
        .is_some_and(|d| d.as_object().is_some_and(|o| o.is_empty()))
    {
        v.as_object_mut().map(|o| o.remove("dns"));
    }
    v
}
