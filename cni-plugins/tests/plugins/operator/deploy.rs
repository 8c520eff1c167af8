//! The Kubernetes manifests of `deploy/`, checked offline: they parse as
//! Kubernetes objects with the fields each kind requires, their references
//! (selectors, volumes, config maps, service accounts, roles) resolve, the
//! CNI configurations they carry parse with our parsers, and their command
//! lines name binaries of this build with flags those binaries accept.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Where deploy/Containerfile puts the binaries.
const IMAGE_BIN_DIR: &str = "/opt/cni-rs/bin/";

struct Manifest {
    file: String,
    objects: Vec<Value>,
}

fn manifests() -> Vec<Manifest> {
    let dir = super::workspace().join("deploy");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("deploy/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml" || e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "deploy/ has {} manifests", files.len());
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
                .unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display()));
            let objects: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
            assert!(!objects.is_empty(), "{}: no object", path.display());
            Manifest {
                file: path.file_name().unwrap().to_string_lossy().into_owned(),
                objects,
            }
        })
        .collect()
}

fn str_at<'a>(v: &'a Value, path: &str) -> Option<&'a str> {
    v.pointer(path).and_then(Value::as_str)
}

fn name(o: &Value) -> &str {
    str_at(o, "/metadata/name").unwrap_or("")
}

#[test]
fn every_object_has_the_fields_its_kind_requires() {
    let all = manifests();
    let by_kind = |kind: &str| -> BTreeSet<String> {
        all.iter()
            .flat_map(|m| &m.objects)
            .filter(|o| o["kind"] == kind)
            .map(|o| name(o).to_string())
            .collect()
    };
    let config_maps = by_kind("ConfigMap");
    let service_accounts = by_kind("ServiceAccount");
    let cluster_roles = by_kind("ClusterRole");
    for m in &all {
        for o in &m.objects {
            let what = format!("{}: {} {}", m.file, o["kind"], name(o));
            let api = str_at(o, "/apiVersion").unwrap_or_else(|| panic!("{what}: no apiVersion"));
            let kind = str_at(o, "/kind").unwrap_or_else(|| panic!("{}: no kind", m.file));
            assert!(!name(o).is_empty(), "{what}: no metadata.name");
            let expected_api = match kind {
                "DaemonSet" => "apps/v1",
                "ConfigMap" | "ServiceAccount" => "v1",
                "ClusterRole" | "ClusterRoleBinding" => "rbac.authorization.k8s.io/v1",
                "CustomResourceDefinition" => "apiextensions.k8s.io/v1",
                other => panic!("{what}: kind {other} is not checked by this test"),
            };
            assert_eq!(api, expected_api, "{what}");
            match kind {
                "DaemonSet" => check_daemonset(o, &what, &config_maps, &service_accounts, &all),
                "ConfigMap" => check_config_map(o, &what),
                "ClusterRoleBinding" => {
                    let role = str_at(o, "/roleRef/name").unwrap_or("");
                    assert!(
                        cluster_roles.contains(role),
                        "{what}: no ClusterRole {role}"
                    );
                    for s in o["subjects"].as_array().expect("subjects") {
                        if s["kind"] == "ServiceAccount" {
                            let sa = s["name"].as_str().unwrap_or("");
                            assert!(
                                service_accounts.contains(sa),
                                "{what}: no ServiceAccount {sa}"
                            );
                            assert!(
                                s["namespace"].is_string(),
                                "{what}: subject without namespace"
                            );
                        }
                    }
                }
                "ClusterRole" => {
                    for r in o["rules"].as_array().expect("rules") {
                        for k in ["apiGroups", "resources", "verbs"] {
                            assert!(r[k].is_array(), "{what}: rule without {k}");
                        }
                    }
                }
                "CustomResourceDefinition" => {
                    for p in [
                        "/spec/group",
                        "/spec/names/kind",
                        "/spec/names/plural",
                        "/spec/scope",
                    ] {
                        assert!(str_at(o, p).is_some(), "{what}: no {p}");
                    }
                    let plural = str_at(o, "/spec/names/plural").unwrap();
                    let group = str_at(o, "/spec/group").unwrap();
                    assert_eq!(name(o), format!("{plural}.{group}"), "{what}");
                }
                _ => {}
            }
        }
    }
}

fn check_daemonset(
    ds: &Value,
    what: &str,
    config_maps: &BTreeSet<String>,
    service_accounts: &BTreeSet<String>,
    all: &[Manifest],
) {
    let selector = ds["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap_or_else(|| panic!("{what}: no spec.selector.matchLabels"));
    assert!(!selector.is_empty(), "{what}: empty selector");
    let labels = ds["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .unwrap_or_else(|| panic!("{what}: no template labels"));
    for (k, v) in selector {
        assert_eq!(
            labels.get(k),
            Some(v),
            "{what}: selector {k}={v} does not match the template"
        );
    }
    let pod = &ds["spec"]["template"]["spec"];
    if let Some(sa) = pod["serviceAccountName"].as_str() {
        assert!(
            service_accounts.contains(sa),
            "{what}: no ServiceAccount {sa}"
        );
    }
    let volumes: BTreeMap<String, &Value> = pod["volumes"]
        .as_array()
        .map(|v| {
            v.iter()
                .map(|v| (v["name"].as_str().unwrap_or("").to_string(), v))
                .collect()
        })
        .unwrap_or_default();
    for (vname, v) in &volumes {
        let sources: Vec<_> = v
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| *k != "name")
            .collect();
        assert_eq!(
            sources.len(),
            1,
            "{what}: volume {vname} needs exactly one source: {sources:?}"
        );
        if let Some(cm) = v["configMap"]["name"].as_str() {
            assert!(
                config_maps.contains(cm),
                "{what}: volume {vname}: no ConfigMap {cm}"
            );
            let data = config_map_data(all, cm);
            for item in v["configMap"]["items"].as_array().into_iter().flatten() {
                let key = item["key"].as_str().unwrap_or("");
                assert!(
                    data.contains_key(key),
                    "{what}: ConfigMap {cm} has no key {key}"
                );
            }
        }
    }
    let containers = pod["containers"]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: no containers"));
    assert!(!containers.is_empty(), "{what}: no containers");
    let init = pod["initContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut names = BTreeSet::new();
    for c in containers.iter().chain(&init) {
        let cname = c["name"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: container without name"));
        assert!(
            names.insert(cname.to_string()),
            "{what}: container name {cname} twice"
        );
        assert!(
            c["image"].as_str().is_some_and(|i| !i.is_empty()),
            "{what}/{cname}: no image"
        );
        let mut paths = BTreeSet::new();
        for mount in c["volumeMounts"].as_array().into_iter().flatten() {
            let vname = mount["name"].as_str().unwrap_or("");
            assert!(
                volumes.contains_key(vname),
                "{what}/{cname}: mount of undefined volume {vname}"
            );
            let path = mount["mountPath"].as_str().unwrap_or("");
            assert!(path.starts_with('/'), "{what}/{cname}: mountPath {path:?}");
            assert!(
                paths.insert(path.to_string()),
                "{what}/{cname}: two mounts at {path}"
            );
        }
    }
}

fn config_map_data(all: &[Manifest], cm: &str) -> serde_json::Map<String, Value> {
    all.iter()
        .flat_map(|m| &m.objects)
        .find(|o| o["kind"] == "ConfigMap" && name(o) == cm)
        .and_then(|o| o["data"].as_object().cloned())
        .unwrap_or_default()
}

/// JSON values of a ConfigMap: CNI configurations parse with cni-types (and
/// name only plugins of this build), multus's daemon configuration with
/// multus-daemon's own parser; any other JSON (flanneld's net-conf.json)
/// must at least parse.
fn check_config_map(cm: &Value, what: &str) {
    let data = cm["data"]
        .as_object()
        .unwrap_or_else(|| panic!("{what}: no data"));
    let bins = super::binaries().all;
    for (key, value) in data {
        let text = value
            .as_str()
            .unwrap_or_else(|| panic!("{what}: {key} is not a string"));
        if !key.ends_with(".json") && !key.ends_with(".conf") && !key.ends_with(".conflist") {
            continue;
        }
        let json: Value =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("{what}: {key}: {e}"));
        if key == "daemon-config.json" {
            let conf = cni_multus::thick::DaemonConfig::from_slice(text.as_bytes(), Path::new(key))
                .unwrap_or_else(|e| panic!("{what}: {key}: {e}"));
            assert_eq!(
                conf.socket_path(),
                Path::new("/run/multus/multus.sock"),
                "{what}"
            );
            continue;
        }
        let types: Vec<String> = if json.get("plugins").is_some() {
            let list = cni_types::NetworkConfigList::from_slice(text.as_bytes())
                .unwrap_or_else(|e| panic!("{what}: {key}: not a conflist: {e}"));
            list.plugins
                .iter()
                .map(|p| p["type"].as_str().unwrap_or("").to_string())
                .collect()
        } else if json.get("type").is_some() {
            let conf = cni_types::NetworkConfig::from_slice(text.as_bytes())
                .unwrap_or_else(|e| panic!("{what}: {key}: not a CNI config: {e}"));
            vec![conf.plugin_type]
        } else {
            continue;
        };
        for t in types {
            assert!(
                bins.contains(&t),
                "{what}: {key} uses plugin {t:?}, not one of ours: {bins:?}"
            );
        }
    }
}

/// The containers' command lines: binaries of the image that this build
/// has, with flags their parsers accept.
#[test]
fn command_lines_name_our_binaries_and_their_flags() {
    let bins = super::binaries().all;
    let mut seen = BTreeSet::new();
    for m in manifests() {
        for ds in m.objects.iter().filter(|o| o["kind"] == "DaemonSet") {
            let pod = &ds["spec"]["template"]["spec"];
            let init = pod["initContainers"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for c in pod["containers"].as_array().unwrap().iter().chain(&init) {
                let Some(command) = c["command"].as_array() else {
                    continue;
                };
                let argv: Vec<String> = command
                    .iter()
                    .chain(c["args"].as_array().into_iter().flatten())
                    .map(|a| a.as_str().expect("string argument").to_string())
                    .collect();
                let what = format!("{}: {}/{}", m.file, name(ds), c["name"]);
                let Some(bin) = argv[0].strip_prefix(IMAGE_BIN_DIR) else {
                    panic!("{what}: {} is not in the image's {IMAGE_BIN_DIR}", argv[0]);
                };
                assert!(
                    bins.contains(bin),
                    "{what}: {bin} is not a binary of cni-plugins"
                );
                match bin {
                    "cni-gc" => check_cni_gc_args(&argv[1..], c, pod, &what),
                    "cni-install" => check_cni_install_args(&argv[1..], &bins, &what),
                    "multus-daemon" => check_multus_daemon_args(&argv[1..], pod, &what),
                    other => panic!("{what}: no flag check for {other}: add one"),
                }
                seen.insert(bin.to_string());
            }
        }
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["cni-gc", "cni-install", "multus-daemon"],
        "the manifests run cni-gc, cni-install and multus-daemon"
    );
}

/// cni-gc's own parser accepts the arguments (a node agent: `--interval`),
/// and what they name is there for it: the runtime's socket, the conf,
/// cache and plugin directories are in mounts of the container, the pod
/// is in the node's network namespace (the plugins work there), may enter
/// pod namespaces (privileged), and sees the runtime's namespaces appear
/// (`/var/run/netns` mounted HostToContainer).
fn check_cni_gc_args(args: &[String], c: &Value, pod: &Value, what: &str) {
    use cni_gc::cli::{parse_args, Command};
    let opts = match parse_args(args.to_vec()) {
        Ok(Command::Run(opts)) => opts,
        other => panic!("{what}: cni-gc {args:?}: {other:?}"),
    };
    assert!(opts.interval.is_some(), "{what}: cni-gc without --interval");
    assert!(!opts.dry_run, "{what}: a dry run collects nothing");
    let mounts: Vec<(&str, &Value)> = c["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| (m["mountPath"].as_str().unwrap_or(""), m))
        .collect();
    let mount_of = |path: &Path| {
        mounts
            .iter()
            .filter(|(at, _)| path.starts_with(at))
            .max_by_key(|(at, _)| at.len())
            .map(|(_, m)| *m)
            .unwrap_or_else(|| panic!("{what}: {} is in no mount", path.display()))
    };
    let socket_dir = opts.cri_socket.parent().unwrap_or(Path::new("/"));
    for p in [socket_dir, &opts.conf_dir, &opts.cache_dir]
        .into_iter()
        .chain(opts.cni_path.iter().map(PathBuf::as_path))
    {
        mount_of(p);
    }
    assert_ne!(
        mount_of(&opts.cache_dir)["readOnly"],
        true,
        "{what}: DEL removes cache files"
    );
    let netns = mount_of(Path::new("/var/run/netns"));
    assert_eq!(netns["mountPropagation"], "HostToContainer", "{what}");
    assert_eq!(pod["hostNetwork"], true, "{what}: plugins work in the node");
    assert_eq!(c["securityContext"]["privileged"], true, "{what}");
}

/// cni-install's own parser accepts the arguments, and every `--only` name
/// is a binary of this build.
fn check_cni_install_args(args: &[String], bins: &BTreeSet<String>, what: &str) {
    let opts = cni_plugins::install::parse_args(args.to_vec(), || Some("/opt/cni-rs/bin".into()))
        .unwrap_or_else(|e| panic!("{what}: cni-install rejects {args:?}: {e}"))
        .unwrap_or_else(|| panic!("{what}: asks for --help"));
    assert_eq!(opts.to, Path::new("/host/opt/cni/bin"), "{what}");
    for name in opts.only.iter().flatten() {
        assert!(
            bins.contains(name),
            "{what}: --only {name}: not a binary of cni-plugins"
        );
    }
}

/// multus-daemon itself parses the flags (run with the config path pointed
/// at a file that does not exist, so it stops after parsing them), and the
/// config path is where the pod mounts the daemon ConfigMap.
fn check_multus_daemon_args(args: &[String], pod: &Value, what: &str) {
    let config = args
        .iter()
        .position(|a| a == "--config")
        .and_then(|i| args.get(i + 1))
        .unwrap_or_else(|| panic!("{what}: multus-daemon without --config"));
    let missing = tempfile::tempdir().unwrap().path().join("absent.json");
    let rewritten: Vec<String> = args
        .iter()
        .map(|a| {
            if a == config {
                missing.display().to_string()
            } else {
                a.clone()
            }
        })
        .collect();
    let out = Command::new(env!("CARGO_BIN_EXE_multus-daemon"))
        .args(&rewritten)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "{what}: multus-daemon started with {rewritten:?}"
    );
    assert!(
        !err.contains("unknown argument") && err.contains("absent.json"),
        "{what}: multus-daemon {rewritten:?}: {err}"
    );
    // The --config file is the daemon-config.json item of a ConfigMap volume.
    let c = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["command"][0]
                .as_str()
                .is_some_and(|s| s.ends_with("multus-daemon"))
        })
        .unwrap();
    let config = Path::new(config);
    let mounted = c["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|mount| {
            let vol = pod["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == mount["name"])
                .unwrap();
            vol["configMap"]["items"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|item| {
                    Path::new(mount["mountPath"].as_str().unwrap())
                        .join(item["path"].as_str().unwrap())
                        == config
                })
        });
    assert!(
        mounted,
        "{what}: --config {} is not a mounted ConfigMap item",
        config.display()
    );
}

/// flannel's conflist is kube-flannel's default: flannel delegating with
/// hairpinMode and isDefaultGateway, then portmap.
#[test]
fn flannel_config_is_the_reference_default() {
    let all = manifests();
    let data = config_map_data(&all, "kube-flannel-cfg");
    let conf: Value = serde_json::from_str(data["cni-conf.json"].as_str().unwrap()).unwrap();
    assert_eq!(conf["plugins"][0]["type"], "flannel");
    assert_eq!(conf["plugins"][0]["delegate"]["hairpinMode"], true);
    assert_eq!(conf["plugins"][0]["delegate"]["isDefaultGateway"], true);
    assert_eq!(conf["plugins"][1]["type"], "portmap");
    assert_eq!(conf["plugins"][1]["capabilities"]["portMappings"], true);
    // And our flannel plugin accepts its entry.
    let entry = serde_json::json!({
        "cniVersion": conf["cniVersion"], "name": conf["name"], "type": "flannel",
        "delegate": conf["plugins"][0]["delegate"],
    });
    let parsed = cni_types::NetworkConfig::from_slice(entry.to_string().as_bytes()).unwrap();
    let flannel: cni_plugins::flannel::FlannelConf = parsed.parse_as().unwrap();
    assert!(flannel.delegate.is_some());
}

/// The image recipe builds from the tarball dist.sh writes, into the
/// directory the manifests run binaries from.
#[test]
fn containerfile_builds_from_the_release_tarball() {
    let text = std::fs::read_to_string(super::workspace().join("deploy/Containerfile")).unwrap();
    assert!(
        text.contains("dist/cni-rs-plugins-linux-${ARCH}-v${VERSION}.tgz"),
        "the Containerfile must COPY dist.sh's tarball"
    );
    assert!(
        text.contains("sha256sum -c"),
        "the tarball's checksum is verified"
    );
    assert!(
        text.contains(IMAGE_BIN_DIR.trim_end_matches('/')),
        "binaries go to {IMAGE_BIN_DIR}"
    );
    let dist = std::fs::read_to_string(super::workspace().join("scripts/dist.sh")).unwrap();
    assert!(dist.contains(r#"name="cni-rs-plugins-linux-$arch-v$version""#));
}
