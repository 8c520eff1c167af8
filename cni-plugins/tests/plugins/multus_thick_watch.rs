//! The daemon's watch cache against the test API server (HTTPS on
//! loopback): list, watch (add, patch, delete), GET on a miss.
#![cfg(feature = "multus")]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cni_multus::k8s::{ClientConfig, HttpKubeClient, KubeClient};
use cni_multus::thick::watch::WatchCache;
use cni_testkit::KubeApiServer;

fn wait_for(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn get_requests(server: &KubeApiServer, path: &str) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path == path)
        .count()
}

#[test]
fn list_watch_and_fallback_get() {
    let server = KubeApiServer::start().unwrap();
    server.add_pod("ns1", "early", "uid-early", &[("a", "1")]);
    server.add_nad("ns1", "net-a", r#"{"type":"bridge"}"#);
    let cfg =
        ClientConfig::from_kubeconfig(server.kubeconfig_path(), Duration::from_secs(5)).unwrap();
    let cache = WatchCache::start(HttpKubeClient::new(&cfg).unwrap());
    wait_for("sync", || cache.is_synced());

    // Listed objects come from memory: no GET of the object.
    let p = cache.get_pod("ns1", "early").unwrap();
    assert_eq!(p.uid, "uid-early");
    let n = cache
        .get_network_attachment_definition("ns1", "net-a")
        .unwrap();
    assert_eq!(n.config, r#"{"type":"bridge"}"#);
    assert_eq!(
        get_requests(&server, "/api/v1/namespaces/ns1/pods/early"),
        0
    );
    assert_eq!(cache.stats(), (2, 0));

    // Watched: a new pod, a patch, a deletion.
    server.add_pod("ns1", "late", "uid-late", &[]);
    wait_for("late pod", || cache.cached_pod("ns1", "late").is_some());
    let mut ann = BTreeMap::new();
    ann.insert(
        "k8s.v1.cni.cncf.io/network-status".to_string(),
        Some("[]".to_string()),
    );
    cache.patch_pod_annotations("ns1", "late", &ann).unwrap();
    wait_for("patched annotation", || {
        cache.cached_pod("ns1", "late").is_some_and(|p| {
            p.annotations
                .contains_key("k8s.v1.cni.cncf.io/network-status")
        })
    });
    server.remove_pod("ns1", "early");
    wait_for("deletion", || cache.cached_pod("ns1", "early").is_none());
    assert_eq!(get_requests(&server, "/api/v1/namespaces/ns1/pods/late"), 0);

    // A miss asks the API server.
    let e = cache.get_pod("ns1", "early").unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert_eq!(
        get_requests(&server, "/api/v1/namespaces/ns1/pods/early"),
        1
    );
    assert_eq!(cache.stats().1, 1);
    // Lists and watches went to the cluster-wide paths.
    assert!(get_requests(&server, "/api/v1/pods") >= 2);
    assert!(
        get_requests(
            &server,
            "/apis/k8s.cni.cncf.io/v1/network-attachment-definitions"
        ) >= 2
    );
}
