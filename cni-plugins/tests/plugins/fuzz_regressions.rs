//! Inputs the fuzz targets (`fuzz/`) found to crash, hang or exhaust
//! memory, kept as regular tests with the input bytes inline.
// The kubeconfig cases are multus's: needs the `multus` feature.
#![cfg(feature = "multus")]

use std::path::Path;
use std::time::{Duration, Instant};

use cni_multus::k8s::ClientConfig;

/// `multus_kubeconfig`: a kubeconfig whose CA file is `/dev/zero` was read
/// whole, until the process ran out of memory (libFuzzer: out-of-memory,
/// 2 GiB). Files a kubeconfig names are now read up to 4 MiB.
#[test]
fn kubeconfig_naming_an_endless_file_is_an_error_not_an_oom() {
    for key in [
        "certificate-authority",
        "client-certificate",
        "client-key",
        "tokenFile",
    ] {
        let (cluster_extra, user_extra) = if key == "certificate-authority" {
            (format!("    {key}: /dev/zero\n"), String::new())
        } else if key == "tokenFile" {
            (String::new(), format!("    {key}: /dev/zero\n"))
        } else {
            // Certificate and key come together; the other one is inline.
            let other = if key == "client-key" {
                "client-certificate-data: Q0VSVA=="
            } else {
                "client-key-data: S0VZ"
            };
            (
                String::new(),
                format!("    {key}: /dev/zero\n    {other}\n"),
            )
        };
        // An inline token would win over tokenFile.
        let token = if key == "tokenFile" {
            ""
        } else {
            "    token: t\n"
        };
        let text = format!(
            "apiVersion: v1\nclusters:\n- name: k\n  cluster:\n    server: https://127.0.0.1:6443\n{cluster_extra}\
             users:\n- name: u\n  user:\n{user_extra}{token}"
        );
        let start = Instant::now();
        let err = ClientConfig::from_kubeconfig_str(
            &text,
            Path::new("/nonexistent"),
            "fuzz.kubeconfig",
            Duration::from_secs(1),
        )
        .expect_err(key);
        assert!(start.elapsed() < Duration::from_secs(10), "{key}");
        assert!(err.to_string().contains("larger than"), "{key}: {err}");
    }
}

/// The kubeconfig file itself is capped the same way.
#[test]
fn kubeconfig_path_to_an_endless_file_is_an_error() {
    let err = ClientConfig::from_kubeconfig(Path::new("/dev/zero"), Duration::from_secs(1))
        .expect_err("/dev/zero is no kubeconfig");
    assert!(err.to_string().contains("larger than"), "{err}");
}
