//! The host-device plugin's errors.

use cni_types::ErrorCode;

/// Why a host-device plugin command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure every plugin can meet (config, IPAM, kernel, delegate...).
    #[error(transparent)]
    Shared(#[from] crate::Error),
    /// The config selects no device.
    #[error(r#"specify either "device", "hwaddr", "kernelpath" or "pciBusID""#)]
    Unspecified,
    /// The PCI device's driver link could not be read.
    #[error("error with host device: {}: {source}", .path.display())]
    PciDriverLookup {
        /// The `driver` link under the device's sysfs directory.
        path: std::path::PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The selected device was not found on the node.
    #[error("failed to find host device: {source}")]
    DeviceLookup {
        /// Why (a lookup error below).
        source: Box<Error>,
    },
    /// `hwaddr` is not a MAC address.
    #[error("failed to parse MAC address {mac:?}")]
    MacInvalid {
        /// The configured value.
        mac: String,
    },
    /// No node link matches the `hwaddr` or `kernelpath` selector.
    #[error("failed to find physical interface")]
    PhysicalInterfaceNotFound {
        /// The selector (`"hwaddr <mac>"`, `"kernelpath <path>"`).
        selector: String,
    },
    /// `kernelpath` is not under `/sys/devices/`.
    #[error("kernel device path {path:?} must be absolute and begin with /sys/devices/")]
    KernelPathInvalid {
        /// The configured path.
        path: String,
    },
    /// The `net` directory of a `kernelpath` device could not be read.
    #[error("failed to find network devices at {dir:?}")]
    KernelPathNetDir {
        /// The directory.
        dir: std::path::PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The PCI device has no `net` directory (it has no netdev).
    #[error("no net directory under pci device {pci}")]
    PciNetDirMissing {
        /// The PCI address.
        pci: String,
    },
    /// The PCI device's `net` directory could not be read.
    #[error("failed to read net directory {}: {source}", .dir.display())]
    PciNetDirRead {
        /// The directory.
        dir: std::path::PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The PCI device's `net` directory is empty.
    #[error("failed to find device name for pci address {pci}")]
    PciNetdevMissing {
        /// The PCI address.
        pci: String,
    },
    /// DEL: moving the device back to the node failed (it stays in the
    /// pod, up again, so DEL can be retried).
    #[error("failed to move {ifname:?} to the host as {original:?}: {source}")]
    MoveOut {
        /// Its name in the pod.
        ifname: String,
        /// Its name on the node.
        original: String,
        /// The kernel error.
        source: Box<cni_netns::Error>,
    },
}

impl crate::PluginError for Error {
    fn code(&self) -> ErrorCode {
        match self {
            Error::Shared(e) => e.code(),
            _ => ErrorCode::Internal,
        }
    }

    fn shared(&self) -> Option<&crate::Error> {
        match self {
            Error::Shared(e) => Some(e),
            _ => None,
        }
    }
}

crate::plugin_error_glue!(Error);

/// `Result` with the host-device plugin's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
