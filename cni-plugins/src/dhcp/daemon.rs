//! `dhcp daemon`: holds one DHCP lease per attachment, each maintained by
//! a thread of its own (renew at T1, rebind at T2, lost on NAK or
//! expiry), persisted to one file per attachment so that a restarted
//! daemon resumes and renews every lease instead of forgetting it, and
//! released unicast from the leased address on DEL and GC. The file is
//! written (pending) before the DHCPREQUEST and confirmed after the ACK,
//! so a lease the server grants just before the daemon dies is released
//! at the next start instead of being held by nobody: from the pod, or,
//! when the main plugin's rollback already removed the pod interface,
//! unicast from the daemon's own namespace (the node). An ADD that fails
//! puts the pod interface it brought up down again (Go leaves it up).
//! The link steps in the pod ([`prepare_link`], [`find_link`],
//! [`holds_address`]) work on any kernel's handle
//! ([`NetnsHandle`](cni_netns::kernel::NetnsHandle)); the DHCP exchange
//! and the lease's namespace are the real kernel's.
//!
//! Requests come over a unix socket, one connection per request, handled
//! on a thread each, at most 256 at once (more get "try again", code 11:
//! [`cni_files::daemon::serve`]; see [`cni_ipam::dhcp::rpc`] for the wire
//! format).
//! Requests for different attachments run concurrently; requests for one
//! attachment are serialized.

use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use cni_ipam::dhcp::client::{
    client_id, release_unicast, unix_now, Client, ClientConfig, ClientLink, Renewal,
};
use cni_ipam::dhcp::options;
use cni_ipam::dhcp::rpc::{self, DaemonOp, DaemonReply, DaemonRequest};
use cni_ipam::dhcp::store::{attachment_key, LeaseRecord, LeaseStore};
use cni_netns::{Handle, Netns};
use cni_types::{CniError, CniResult, NetworkConfig, Version};
use tracing::{info, warn};

use super::config::{DaemonOptions, DhcpConfig};
use super::error::{Error, Result};
/// The daemon's link steps in the pod's namespace, over any
/// [`NetKernel`](cni_netns::kernel::NetKernel)'s handle (the DHCP exchange
/// itself runs on the real kernel).
pub use super::pod::{find_link, holds_address, prepare_link, PodLink};
use super::pod::{pod_link, PodSockets};

/// How long a connection may take to send its request.
const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Binds the socket, resumes the persisted leases, and serves forever.
pub fn run(opts: DaemonOptions) -> Result<()> {
    let listener = match opts.activated_fds {
        0 => rpc::listen(&opts.listen_path())?,
        1 => rpc::activated_listener()?,
        n => return Err(Error::TooManyActivatedFds { count: n }),
    };
    if let Some(pidfile) = &opts.pidfile {
        std::fs::write(pidfile, std::process::id().to_string())
            .map_err(|e| crate::Error::io("write pidfile", pidfile, e))?;
    }
    let daemon = Arc::new(Daemon::start(opts)?);
    let never = std::sync::atomic::AtomicBool::new(false);
    let busy = busy();
    cni_files::daemon::serve(
        listener,
        &cni_files::daemon::ServeOptions::new("dhcp"),
        &never,
        move |stream| daemon.serve(stream),
        move |_, _| Some(busy.clone()),
    )
    .map_err(|e| crate::Error::exec(e).into())
}

/// The answer to a connection over the cap (or whose thread the system
/// refused), given at once without reading its request: "try again"
/// (code 11). The client's request, sent meanwhile, is discarded
/// ([`cni_files::daemon::serve`]).
fn busy() -> Vec<u8> {
    let reply = DaemonReply {
        result: None,
        error: Some(CniError::new(
            cni_types::ErrorCode::TryAgainLater,
            format!(
                "dhcp daemon busy: {} requests in flight or no thread to serve this one",
                cni_files::daemon::DEFAULT_MAX_CONNECTIONS
            ),
            "retry later",
        )),
    };
    rpc::reply_line(&reply).unwrap_or_default()
}

/// The daemon's state: the lease store and one slot per attachment.
pub struct Daemon {
    opts: DaemonOptions,
    store: LeaseStore,
    slots: Mutex<HashMap<String, Arc<Mutex<Option<Active>>>>>,
}

/// A maintained lease: its record (updated by renewals), why it was lost
/// if it was, and the maintaining thread.
struct Active {
    shared: Arc<Shared>,
    /// The pod's namespace, held open as long as the lease: renewals,
    /// DEL and GC reach the pod through it even after the runtime removed
    /// the namespace's path; dropped with the lease.
    netns: Arc<Netns>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    record: Mutex<LeaseRecord>,
    lost: Mutex<Option<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Active {
    /// Starts maintaining `record`; `resume` renews at once (after a
    /// daemon restart) instead of at T1.
    /// Fails when the system refuses the thread.
    fn start(
        record: LeaseRecord,
        netns: Arc<Netns>,
        store: LeaseStore,
        resend_max: Duration,
        resume: bool,
    ) -> std::io::Result<Active> {
        let shared = Arc::new(Shared {
            record: Mutex::new(record),
            lost: Mutex::new(None),
        });
        let (stop, stopped) = mpsc::channel();
        let s = Arc::clone(&shared);
        let ns = Arc::clone(&netns);
        let spawned = std::thread::Builder::new()
            .name("dhcp-lease".into())
            .spawn(move || maintain(&s, &ns, &store, &stopped, resend_max, resume));
        match spawned {
            Ok(thread) => Ok(Active {
                shared,
                netns,
                stop: Some(stop),
                thread: Some(thread),
            }),
            Err(e) => Err(e),
        }
    }

    fn record(&self) -> LeaseRecord {
        lock(&self.shared.record).clone()
    }

    fn lost(&self) -> Option<String> {
        lock(&self.shared.lost).clone()
    }

    /// Stops the thread (it finishes a transaction in flight first) and
    /// returns the last record and the pod's namespace.
    fn stop(mut self) -> (LeaseRecord, Arc<Netns>) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        (self.record(), Arc::clone(&self.netns))
    }
}

/// The lease's life: renew at T1 (unicast), rebind at T2 (broadcast),
/// retry at half the time left (at most `resend_max`, at least 1 s), lost
/// on NAK, on expiry, or when the pod interface is gone. A resumed lease
/// is renewed at once, or (expired while the daemon was down) confirmed
/// by INIT-REBOOT.
fn maintain(
    shared: &Shared,
    netns: &Netns,
    store: &LeaseStore,
    stop: &mpsc::Receiver<()>,
    resend_max: Duration,
    resume: bool,
) {
    let lose = |why: String| {
        let key = lock(&shared.record).key();
        warn!("lease {key}: {why}");
        *lock(&shared.lost) = Some(why);
    };
    let mut next = if resume {
        unix_now()
    } else {
        lock(&shared.record).lease.t1()
    };
    // A lease that expired while the daemon was down gets one INIT-REBOOT
    // (the pod still uses the address); later expiry loses it.
    let mut reboot = resume;
    loop {
        let wait = Duration::from_secs(next.saturating_sub(unix_now()));
        match stop.recv_timeout(wait) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let record = lock(&shared.record).clone();
        let now = unix_now();
        let expired = now >= record.lease.expiry();
        if expired && !reboot {
            return lose("lease expired without being renewed".into());
        }
        reboot = false;
        let link = match pod_link(netns, &record.ifname) {
            Ok(l) => l,
            Err(e) => return lose(format!("stopped maintaining: {e}")),
        };
        let sockets = PodSockets::new(netns, link);
        let client = Client {
            config: &record.client,
            link,
            ifname: &record.ifname,
            sockets: &sockets,
        };
        let rebinding = now >= record.lease.t2();
        let outcome = if expired {
            client.reboot(&record.lease)
        } else if rebinding {
            client.rebind(&record.lease)
        } else {
            client.renew(&record.lease)
        };
        match outcome {
            Ok(Some(Renewal::Extended(lease))) if lease.address == record.lease.address => {
                next = lease.t1();
                let mut r = lock(&shared.record);
                r.lease = lease;
                if let Err(e) = store.save(&r) {
                    warn!("lease {}: persist renewal: {e}", r.key());
                }
                info!(
                    "lease {}: {} renewed until {}",
                    r.key(),
                    r.lease.address,
                    r.lease.expiry()
                );
            }
            Ok(Some(Renewal::Extended(other))) => {
                return lose(format!("server moved the lease to {}", other.address))
            }
            Ok(Some(Renewal::Refused(why))) => return lose(format!("DHCPNAK: {why}")),
            Ok(None) | Err(_) if expired => {
                return lose(
                    "lease expired while the daemon was down and INIT-REBOOT got no answer".into(),
                )
            }
            Ok(None) | Err(_) => {
                let end = if rebinding {
                    record.lease.expiry()
                } else {
                    record.lease.t2()
                };
                let half = end.saturating_sub(now) / 2;
                next = now + half.clamp(1, resend_max.as_secs().max(1));
                if let Err(e) = outcome {
                    warn!("lease {}: renew: {e}", record.key());
                }
            }
        }
    }
}

/// The CNI result of a lease (1.1.0 shape).
fn result_of(record: &LeaseRecord) -> Result<CniResult> {
    let ack = record.lease.ack()?;
    Ok(CniResult {
        interfaces: Vec::new(),
        ips: vec![options::ip_config(&ack)?],
        routes: options::routes(&ack, record.priority),
        dns: options::dns(&ack, &record.client.request_list),
    })
}

impl Daemon {
    /// Opens the state directory and resumes every lease whose pod
    /// interface still exists; the others are forgotten (their namespace
    /// is gone, nobody can use them). A pending lease (its REQUEST sent,
    /// its ACK not recorded: the daemon died during that ADD, which
    /// therefore failed) is released, not resumed: from the pod, or from
    /// the node when the pod interface is gone; one whose release cannot
    /// be sent is kept for the attachment's DEL or the next start.
    pub fn start(opts: DaemonOptions) -> Result<Daemon> {
        let store = LeaseStore::open(&opts.state_dir)?;
        let daemon = Daemon {
            opts,
            store,
            slots: Mutex::new(HashMap::new()),
        };
        let (records, errors) = daemon.store.load_all();
        for e in errors {
            warn!("skipping unreadable lease file: {e}");
        }
        for record in records {
            let key = record.key();
            if record.pending {
                // Written before a REQUEST whose ACK was never recorded:
                // that ADD failed (the daemon died before answering it),
                // but the server may have granted the address.
                info!(
                    "lease {key}: {} requested by an ADD the daemon did not finish: releasing it",
                    record.lease.address
                );
                daemon.release_pending(&record);
                continue;
            }
            let found = Netns::open(&record.netns)
                .map_err(Error::from)
                .and_then(|ns| pod_link(&ns, &record.ifname).map(|_| ns));
            let ns = match found {
                Ok(ns) => Arc::new(ns),
                Err(e) => {
                    info!("forgetting lease {key} ({}): {e}", record.lease.address);
                    if let Err(e) = daemon.store.remove(&key) {
                        warn!("{e}");
                    }
                    continue;
                }
            };
            info!("resuming lease {key}: {}", record.lease.address);
            match Active::start(
                record,
                ns,
                daemon.store.clone(),
                daemon.opts.resend_max,
                true,
            ) {
                Ok(active) => *lock(&daemon.slot(&key)) = Some(active),
                // Kept on disk: the next start resumes it.
                Err(e) => warn!("lease {key}: no thread to maintain it: {e}"),
            }
        }
        Ok(daemon)
    }

    fn slot(&self, key: &str) -> Arc<Mutex<Option<Active>>> {
        Arc::clone(lock(&self.slots).entry(key.to_owned()).or_default())
    }

    /// Drops attachment `key`'s slot when it holds no lease and no request
    /// uses it, so that DELs of attachments the daemon never leased (or
    /// no longer does) leave nothing behind. Nobody else holding the slot
    /// means nobody can be waiting on its lock.
    fn forget_if_idle(&self, key: &str) {
        let mut slots = lock(&self.slots);
        let idle = slots
            .get(key)
            .is_some_and(|s| Arc::strong_count(s) == 1 && lock(s).is_none());
        if idle {
            slots.remove(key);
        }
    }

    /// The attachments the daemon keeps a slot for (each lease held, and
    /// those a request is working on).
    pub fn tracked(&self) -> usize {
        lock(&self.slots).len()
    }

    /// Answers one connection.
    fn serve(&self, stream: UnixStream) {
        let _ = stream.set_read_timeout(Some(REQUEST_READ_TIMEOUT));
        let reply = match rpc::read_request(&stream) {
            Ok(req) => self.handle(&req),
            // A connection closed without a request (a liveness probe).
            Err(e) if e.ends_with("EOF while parsing a value at line 1 column 0") => return,
            Err(e) => DaemonReply {
                result: None,
                error: Some(CniError::new(cni_types::ErrorCode::DecodingFailure, e, "")),
            },
        };
        if let Err(e) = rpc::write_reply(&stream, &reply) {
            warn!("write reply: {e}");
        }
    }

    /// Runs one request.
    pub fn handle(&self, req: &DaemonRequest) -> DaemonReply {
        let outcome = match req.op {
            DaemonOp::Add => self.add(req).map(Some),
            DaemonOp::Del => self.del(req).map(|()| None),
            DaemonOp::Check => self.check(req).map(|()| None),
            DaemonOp::Gc => self.gc(req).map(|()| None),
            DaemonOp::Status => Ok(None),
        };
        // A failed ADD, a DEL, a CHECK of an unknown attachment: nothing
        // to keep a slot for.
        if let Ok((net, _)) = Self::network(req) {
            self.forget_if_idle(&Self::key(req, &net));
        }
        match outcome {
            Ok(result) => DaemonReply {
                result,
                error: None,
            },
            Err(e) => {
                warn!("{:?} {}/{}: {e}", req.op, req.container_id, req.ifname);
                DaemonReply {
                    result: None,
                    error: Some(e.into()),
                }
            }
        }
    }

    fn network(req: &DaemonRequest) -> Result<(NetworkConfig, DhcpConfig)> {
        let bytes = serde_json::to_vec(&req.config).map_err(|source| crate::Error::Serialize {
            object: "network configuration",
            source,
        })?;
        let net = NetworkConfig::from_slice(&bytes)?;
        let conf = DhcpConfig::from_network_config(&net)?;
        Ok((net, conf))
    }

    fn key(req: &DaemonRequest, net: &NetworkConfig) -> String {
        attachment_key(&req.container_id, &net.name, &req.ifname)
    }

    /// ADD: the held lease's result, or a new lease (DORA in the pod).
    fn add(&self, req: &DaemonRequest) -> Result<serde_json::Value> {
        let (net, conf) = Self::network(req)?;
        let slot = self.slot(&Self::key(req, &net));
        let mut slot = lock(&slot);
        if let Some(active) = slot.take() {
            if active.lost().is_none() {
                let record = active.record();
                *slot = Some(active);
                return Ok(result_of(&record)?.to_value(Version::V1_1_0)?);
            }
            active.stop();
        }
        let netns = format!("{}{}", self.opts.host_prefix, req.netns);
        let ns = Arc::new(Netns::open(&netns)?);
        let handle = Handle::in_netns(&ns)?;
        let prepared = prepare_link(&handle, &req.ifname)?;
        let added = self.lease(req, (&net, &conf), (netns, ns), prepared.link, &mut slot);
        if added.is_err() {
            // Beyond Go: a failed ADD leaves the interface as it found it.
            prepared.undo(&handle);
        }
        added
    }

    /// ADD's DORA on the prepared pod interface `link` of namespace `ns`
    /// (at `netns`), and the lease's maintenance started in `slot`.
    fn lease(
        &self,
        req: &DaemonRequest,
        (net, conf): (&NetworkConfig, &DhcpConfig),
        (netns, ns): (String, Arc<Netns>),
        link: ClientLink,
        slot: &mut Option<Active>,
    ) -> Result<serde_json::Value> {
        let client_config = self.client_config(req, net, conf)?;
        let sockets = PodSockets::new(&ns, link);
        let client = Client {
            config: &client_config,
            link,
            ifname: &req.ifname,
            sockets: &sockets,
        };
        let record_of = |lease, pending| LeaseRecord {
            container_id: req.container_id.clone(),
            network: net.name.clone(),
            ifname: req.ifname.clone(),
            netns: netns.clone(),
            client: client_config.clone(),
            priority: conf.priority,
            lease,
            pending,
        };
        // The record goes to disk (pending) before each REQUEST: a daemon
        // that dies before the ACK is recorded finds it at start and
        // releases what the server may have granted. A NAK removes it:
        // the server granted nothing.
        let mut requested = None;
        let acquired = client.acquire(&mut |offered| {
            match offered {
                Some(lease) => {
                    let record = record_of(lease.clone(), true);
                    self.store.save(&record)?;
                    requested = Some(record);
                }
                None => {
                    if let Some(record) = requested.take() {
                        self.store.remove(&record.key())?;
                    }
                }
            }
            Ok(())
        });
        let record = match acquired {
            Ok(lease) => record_of(lease, false),
            Err(e) => {
                // The last REQUEST may have been granted with its ACK
                // lost: give it back.
                if let Some(record) = requested {
                    self.give_back(&client, &record);
                }
                return Err(e.into());
            }
        };
        let result = result_of(&record).and_then(|r| {
            self.store.save(&record)?;
            Ok(r.to_value(Version::V1_1_0)?)
        });
        match result {
            Ok(value) => {
                info!(
                    "lease {}: {} from {}",
                    record.key(),
                    record.lease.address,
                    record.lease.server
                );
                let started = Active::start(
                    record.clone(),
                    Arc::clone(&ns),
                    self.store.clone(),
                    self.opts.resend_max,
                    false,
                );
                match started {
                    Ok(active) => {
                        *slot = Some(active);
                        Ok(value)
                    }
                    // A lease nobody renews would expire under the pod:
                    // give it back and let the runtime retry.
                    Err(e) => {
                        self.give_back(&client, &record);
                        Err(crate::Error::Cni(CniError::new(
                            cni_types::ErrorCode::TryAgainLater,
                            format!("dhcp daemon: no thread to maintain the lease: {e}"),
                            "retry later",
                        ))
                        .into())
                    }
                }
            }
            Err(e) => {
                self.give_back(&client, &record);
                Err(e)
            }
        }
    }

    /// Undoes a failed ADD's lease: DHCPRELEASE, then its record goes
    /// (a record that cannot be removed stays pending or confirmed on
    /// disk: the next start releases or resumes it).
    fn give_back(&self, client: &Client<'_>, record: &LeaseRecord) {
        let key = record.key();
        if let Err(e) = client.release(&record.lease) {
            warn!("lease {key}: release {}: {e}", record.lease.address);
        }
        if let Err(e) = self.store.remove(&key) {
            warn!("lease {key}: {e}");
        }
    }

    /// Go's client identity and options, the host name from
    /// `K8S_POD_NAME` unless `provide` sets option 12, and the timing
    /// (network keys over daemon flags).
    fn client_config(
        &self,
        req: &DaemonRequest,
        net: &NetworkConfig,
        conf: &DhcpConfig,
    ) -> Result<ClientConfig> {
        let mut provide = vec![];
        let pod_name = req
            .args
            .split(';')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == "K8S_POD_NAME")
            .map(|(_, v)| v);
        if let Some(name) = pod_name.filter(|n| !n.is_empty() && n.len() <= 255) {
            provide.push((
                cni_ipam::dhcp::message::opt::HOST_NAME,
                name.as_bytes().to_vec(),
            ));
        }
        for (code, value) in options::provided_options(&conf.provide, &req.args)? {
            provide.retain(|(c, _)| *c != code);
            provide.push((code, value));
        }
        let mut id = client_id(&req.container_id, &net.name, &req.ifname);
        if let Some(pos) = provide
            .iter()
            .position(|(c, _)| *c == cni_ipam::dhcp::message::opt::CLIENT_ID)
        {
            id = provide.remove(pos).1;
        }
        Ok(ClientConfig {
            client_id: id,
            request_list: options::parameter_request_list(&conf.request)?,
            provide,
            broadcast: self.opts.broadcast,
            timeout: conf.timeout.unwrap_or(self.opts.timeout),
            resend_max: conf.resend_max.unwrap_or(self.opts.resend_max),
            resend_timeout: conf.resend_timeout.unwrap_or(self.opts.resend_timeout),
        })
    }

    /// DEL: stop maintaining, release, forget. Without a lease: success.
    fn del(&self, req: &DaemonRequest) -> Result<()> {
        let (net, _) = Self::network(req)?;
        let key = Self::key(req, &net);
        let slot = self.slot(&key);
        let mut slot = lock(&slot);
        if let Some(active) = slot.take() {
            let lost = active.lost();
            let (record, ns) = active.stop();
            if lost.is_none() {
                self.release(&record, Some(&ns));
            }
        } else if let Ok(Some(record)) = self.store.load(&key) {
            // Kept by a start that could not release it: this DEL (the
            // runtime's, after the failed ADD) tries again.
            if record.pending {
                self.release_pending(&record);
                return Ok(());
            }
        }
        Ok(self.store.remove(&key)?)
    }

    /// Sends DHCPRELEASE for `record`: from the leased address in the pod
    /// (`ns`) while its interface exists; once it is gone (a main plugin
    /// removed it: bridge's rollback of the failed ADD, a DEL that deleted
    /// the link first), unicast to the server from the daemon's own
    /// namespace (the node), with the lease's client identifier and
    /// `chaddr`. Whether it was sent.
    fn release(&self, record: &LeaseRecord, ns: Option<&Netns>) -> bool {
        let key = record.key();
        let address = record.lease.address;
        let gone = match ns.map(|ns| pod_link(ns, &record.ifname).map(|l| (ns, l))) {
            Some(Ok((ns, link))) => {
                let sockets = PodSockets::new(ns, link);
                let client = Client {
                    config: &record.client,
                    link,
                    ifname: &record.ifname,
                    sockets: &sockets,
                };
                return match client.release(&record.lease) {
                    Ok(()) => {
                        info!("lease {key}: {address} released");
                        true
                    }
                    Err(e) => {
                        warn!("lease {key}: release {address}: {e}");
                        false
                    }
                };
            }
            Some(Err(e)) => e.to_string(),
            None => "its namespace is gone".to_owned(),
        };
        match release_unicast(&record.client, &record.lease) {
            Ok(()) => {
                info!("lease {key}: {address} released from the node (the pod interface is gone: {gone})");
                true
            }
            Err(e) => {
                warn!("lease {key}: {address} not released: the pod interface is gone ({gone}) and {e}");
                false
            }
        }
    }

    /// Releases a pending record (its ADD failed, the server may have
    /// granted the address) and removes it. A release that cannot be sent
    /// (the pod interface gone and no route from the node to the server)
    /// keeps the record, so that the attachment's DEL or the next start
    /// tries again, until the offered lease would have expired on the
    /// server (then it goes unreleased).
    fn release_pending(&self, record: &LeaseRecord) {
        let key = record.key();
        let ns = Netns::open(&record.netns).ok();
        let sent = self.release(record, ns.as_ref());
        if !sent && unix_now() < record.lease.expiry() {
            return warn!(
                "lease {key}: kept pending: the attachment's DEL or the next start retries the release until {}",
                record.lease.expiry()
            );
        }
        if let Err(e) = self.store.remove(&key) {
            warn!("lease {key}: {e}");
        }
    }

    /// CHECK: the lease is held (not lost) and its address is on the
    /// interface in the pod's namespace.
    fn check(&self, req: &DaemonRequest) -> Result<()> {
        let (net, _) = Self::network(req)?;
        let key = Self::key(req, &net);
        let slot = self.slot(&key);
        let slot = lock(&slot);
        let active = slot
            .as_ref()
            .ok_or_else(|| Error::LeaseMissing { key: key.clone() })?;
        if let Some(why) = active.lost() {
            return Err(Error::LeaseLost {
                key,
                reason: why.to_string(),
            });
        }
        let record = active.record();
        let handle = Handle::in_netns(&active.netns)?;
        if !holds_address(&handle, &record.ifname, record.lease.address)? {
            return Err(Error::AddressMissing {
                address: record.lease.address,
                ifname: record.ifname.clone(),
                netns: record.netns.clone(),
            });
        }
        Ok(())
    }

    /// GC: release and forget the leases of this network whose
    /// attachment is not in the valid list.
    fn gc(&self, req: &DaemonRequest) -> Result<()> {
        let (net, _) = Self::network(req)?;
        // The plugin refuses a GC without the list before it gets here;
        // the socket is open to any local root client, so the daemon
        // refuses it too rather than release every lease of the network.
        let valid = net
            .valid_attachments()?
            .ok_or(Error::ValidAttachmentsMissing)?;
        let slots: Vec<_> = lock(&self.slots).values().cloned().collect();
        for entry in slots {
            let mut slot = lock(&entry);
            let stale = slot.as_ref().map(Active::record).filter(|r| {
                r.network == net.name
                    && !valid
                        .iter()
                        .any(|a| a.container_id == r.container_id && a.ifname == r.ifname)
            });
            let Some(record) = stale else { continue };
            if let Some(active) = slot.take() {
                let lost = active.lost();
                let (record, ns) = active.stop();
                if lost.is_none() {
                    self.release(&record, Some(&ns));
                }
            }
            self.store.remove(&record.key())?;
            drop(slot);
            drop(entry);
            self.forget_if_idle(&record.key());
        }
        Ok(())
    }
}
