//! Certificates generated with rcgen: `driftgate certs dev` (files for development) and, in
//! [`rotation`] and `driftgate_kube::runtime_certs`, the CA and serving certificate `serve` keeps in a Secret.
//!
//! `driftgate certs dev`:
//! Writes `ca.crt`, `ca.key`, `tls.crt`, `tls.key` into `out`; the serving certificate is
//! ECDSA P-256, signed by the CA, with SANs `localhost`, `127.0.0.1`, `driftgate`,
//! `driftgate.driftgate.svc`, `driftgate.driftgate.svc.cluster.local` and every `extra_hosts`
//! entry (DNS name or IP). Private keys are written with mode 0600.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::string::Ia5String;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, SanType,
};
use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::{DnsName, ServerName, UnixTime};

pub mod pem;
pub mod rotation;

use crate::error::{Error, Result};
use pem::TlsFiles;

/// The names the serving certificate always carries: local use, and the in-cluster Service
/// `driftgate` in namespace `driftgate` under each name the API server may use for it.
pub const DEFAULT_HOSTS: [&str; 5] = [
    "localhost",
    "127.0.0.1",
    "driftgate",
    "driftgate.driftgate.svc",
    "driftgate.driftgate.svc.cluster.local",
];

/// How long the development certificates are valid.
pub const VALIDITY: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// Where the development certificates are.
#[derive(Clone, Debug)]
pub struct DevCertPaths {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl DevCertPaths {
    pub fn in_dir(dir: &Path) -> Self {
        DevCertPaths {
            ca_cert: dir.join("ca.crt"),
            ca_key: dir.join("ca.key"),
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        }
    }

    /// The serving pair, as the server loads it.
    pub fn tls_files(&self) -> TlsFiles {
        TlsFiles {
            cert: self.cert.clone(),
            key: self.key.clone(),
        }
    }
}

/// The serving certificate's names: [`DEFAULT_HOSTS`] then `extra_hosts`, without repeats.
/// Each extra host must be an IP address or a DNS name (a leading `*.` wildcard is allowed).
pub fn serving_hosts(extra_hosts: &[String]) -> Result<Vec<String>> {
    let mut hosts: Vec<String> = DEFAULT_HOSTS.iter().map(|h| (*h).to_owned()).collect();
    for host in extra_hosts {
        let host = host.trim();
        let name = host.strip_prefix("*.").unwrap_or(host);
        if host.parse::<IpAddr>().is_err() && DnsName::try_from(name).is_err() {
            return Err(Error::Certs {
                reason: format!(
                    "--host \"{host}\" is neither a DNS name (such as webhook.example.com) \
                     nor an IP address"
                ),
            });
        }
        if !hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
            hosts.push(host.to_owned());
        }
    }
    Ok(hosts)
}

fn certs_error(reason: impl std::fmt::Display) -> Error {
    Error::Certs {
        reason: reason.to_string(),
    }
}

/// Generates a fresh CA and serving certificate into `out` (created if missing), replacing any.
pub fn generate_dev_certs(out: &Path, extra_hosts: &[String]) -> Result<DevCertPaths> {
    let hosts = serving_hosts(extra_hosts)?;

    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|_| certs_error("the system clock is before 1970"))?;
    // Valid from an hour ago, so a client whose clock is a little behind ours accepts it.
    let not_before = since_epoch.saturating_sub(Duration::from_secs(3600));
    let not_after = since_epoch + VALIDITY;
    let issued = issue("driftgate development CA", not_before, not_after, &hosts)?;

    fs::create_dir_all(out).map_err(|source| Error::Write {
        path: out.to_owned(),
        source,
    })?;
    let paths = DevCertPaths::in_dir(out);
    write_atomically(
        &paths.ca_cert,
        issued.ca_cert.as_bytes(),
        Visibility::Public,
    )?;
    write_atomically(&paths.ca_key, issued.ca_key.as_bytes(), Visibility::Private)?;
    write_atomically(&paths.key, issued.key.as_bytes(), Visibility::Private)?;
    write_atomically(&paths.cert, issued.cert.as_bytes(), Visibility::Public)?;
    Ok(paths)
}

fn subject_alt_names(hosts: &[String]) -> Result<Vec<SanType>> {
    hosts
        .iter()
        .map(|host| match host.parse::<IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => Ia5String::try_from(host.as_str()).map(SanType::DnsName),
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(certs_error)
}

/// A new CA and a serving certificate for `hosts` signed by it, valid from `now` (less a
/// few minutes, for clients whose clock is behind) for `validity`: one generation of the
/// runtime-mode Secret.
pub fn issue_generation(
    now: jiff::Timestamp,
    validity: Duration,
    hosts: &[String],
) -> Result<rotation::Generation> {
    let since_epoch = Duration::from_secs(
        u64::try_from(now.as_second()).map_err(|_| certs_error("the clock is before 1970"))?,
    );
    let not_before = since_epoch.saturating_sub(Duration::from_secs(300));
    let not_after = since_epoch + validity;
    let issued = issue("driftgate CA", not_before, not_after, hosts)?;
    rotation::generation_from_pem(&issued.ca_cert, &issued.ca_key, &issued.cert, &issued.key)
        .map_err(|e| {
            certs_error(format!(
                "the certificate just generated does not check: {e}"
            ))
        })
}

/// A CA and a serving certificate it signed, as PEM.
struct Issued {
    ca_cert: String,
    ca_key: String,
    cert: String,
    key: String,
}

/// A new CA (named `ca_label` and a short id of its key) and a serving certificate for `hosts`
/// signed by it, both valid from `not_before` to `not_after` (since the Unix epoch).
fn issue(
    ca_label: &str,
    not_before: Duration,
    not_after: Duration,
    hosts: &[String],
) -> Result<Issued> {
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    let (not_before, not_after) = (epoch + not_before, epoch + not_after);
    let subject_alt_names = subject_alt_names(hosts)?;
    let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(certs_error)?;
    let mut ca_params = CertificateParams::default();
    // Each CA gets its own name. Issuers are found by name, so two CAs named alike (an old one
    // still trusted next to a new one) make verifiers try the wrong key and report a bad
    // signature instead of an unknown issuer.
    let ca_id: String = ca_params.key_identifier(&ca_key)[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    ca_params.distinguished_name = name(&format!("{ca_label} {ca_id}"));
    // pathlen 0: this CA signs serving certificates, never another CA.
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca_params.not_before = not_before;
    ca_params.not_after = not_after;
    let ca_key_pem = ca_key.serialize_pem();
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).map_err(certs_error)?;

    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(certs_error)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = name("driftgate");
    params.subject_alt_names = subject_alt_names;
    params.is_ca = IsCa::ExplicitNoCa;
    // ECDSA signs the handshake; it never encrypts a key, so digitalSignature only.
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = not_before;
    params.not_after = not_after;
    let cert = params.signed_by(&key, &ca).map_err(certs_error)?;
    Ok(Issued {
        ca_cert: ca.pem(),
        ca_key: ca_key_pem,
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

fn name(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "driftgate");
    name.push(DnType::CommonName, common_name);
    name
}

#[derive(Clone, Copy)]
enum Visibility {
    Public,
    Private,
}

/// Writes `path` so that a reader sees the old contents or the new, never part of either: the
/// contents go to a temporary file in the same directory, which is then renamed over `path`.
/// A private file is created with mode 0600, so its key is never readable by others, not even
/// between creation and a chmod.
fn write_atomically(path: &Path, contents: &[u8], visibility: Visibility) -> Result<()> {
    let file_name = path
        .file_name()
        .expect("certificate paths end in a file name")
        .to_string_lossy();
    let temp = path.with_file_name(format!(".{file_name}.{}.tmp", std::process::id()));
    let write = || -> std::io::Result<()> {
        // A stale temporary file from a crashed run would make create_new fail.
        match fs::remove_file(&temp) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut options = OpenOptions::new();
        // create_new: never write through a file (or symlink) someone else put there.
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(match visibility {
                Visibility::Public => 0o644,
                Visibility::Private => 0o600,
            });
        }
        #[cfg(not(unix))]
        let _ = visibility;
        let mut file = options.open(&temp)?;
        file.write_all(contents)?;
        file.sync_all()?;
        fs::rename(&temp, path)
    };
    write().map_err(|source| {
        let _ = fs::remove_file(&temp);
        Error::Write {
            path: path.to_owned(),
            source,
        }
    })
}

/// Returns the certificates in `out`, generating them first when any file is missing.
///
/// Also regenerated when the serving pair does not load, or the serving certificate does not
/// verify against `ca.crt` for `localhost` right now (another CA, or expired). Regenerating
/// replaces the CA too, with only the default hosts.
pub fn ensure_dev_certs(out: &Path) -> Result<DevCertPaths> {
    let paths = DevCertPaths::in_dir(out);
    match check_dev_certs(&paths) {
        Ok(()) => Ok(paths),
        Err(reason) => {
            tracing::info!(dir = %out.display(), %reason, "generating development certificates");
            generate_dev_certs(out, &[])
        }
    }
}

/// Why the certificates in `paths` cannot be used as they are, if they cannot.
fn check_dev_certs(paths: &DevCertPaths) -> std::result::Result<(), String> {
    for path in [&paths.ca_cert, &paths.ca_key, &paths.cert, &paths.key] {
        if !path.is_file() {
            return Err(format!("{} is missing", path.display()));
        }
    }
    // The checks `serve` makes of the pair (parsable, key matches certificate).
    let files = paths.tls_files();
    let (cert, key) = (pem::read(&files.cert), pem::read(&files.key));
    let (cert, key) = (
        cert.map_err(|e| e.to_string())?,
        key.map_err(|e| e.to_string())?,
    );
    pem::certified_key_from_pem(&files, &cert, &key).map_err(|e| e.to_string())?;
    let read = |path: &Path| {
        let pem = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        pem::parse_cert_chain(path, &pem).map_err(|e| e.to_string())
    };
    let mut roots = RootCertStore::empty();
    for ca in read(&paths.ca_cert)? {
        roots
            .add(ca)
            .map_err(|e| format!("{}: not a usable CA: {e}", paths.ca_cert.display()))?;
    }
    let chain = read(&paths.cert)?;
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), pem::provider())
        .build()
        .map_err(|e| format!("{}: {e}", paths.ca_cert.display()))?;
    let localhost = ServerName::try_from("localhost").expect("a valid DNS name");
    verifier
        .verify_server_cert(&chain[0], &chain[1..], &localhost, &[], UnixTime::now())
        .map_err(|e| {
            format!(
                "{} does not verify against {} for localhost: {e}",
                paths.cert.display(),
                paths.ca_cert.display()
            )
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A runtime generation verifies, as the API server checks it, for the Service's names
    /// against its own CA, and for no other name.
    #[test]
    fn an_issued_generation_verifies_for_the_service_names_against_its_ca() {
        let hosts = [
            "driftgate.driftgate-system.svc".to_owned(),
            "127.0.0.1".to_owned(),
        ];
        let now = jiff::Timestamp::now();
        let generation = issue_generation(now, Duration::from_secs(3600), &hosts).unwrap();
        let mut roots = RootCertStore::empty();
        for ca in
            pem::parse_cert_chain(Path::new("ca.crt"), generation.ca_cert_pem.as_bytes()).unwrap()
        {
            roots.add(ca).unwrap();
        }
        let verifier =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), pem::provider())
                .build()
                .unwrap();
        let chain =
            pem::parse_cert_chain(Path::new("tls.crt"), generation.cert_pem.as_bytes()).unwrap();
        let verify = |name: &str| {
            verifier.verify_server_cert(
                &chain[0],
                &chain[1..],
                &ServerName::try_from(name.to_owned()).unwrap(),
                &[],
                UnixTime::now(),
            )
        };
        verify("driftgate.driftgate-system.svc").expect("the Service name verifies");
        verify("127.0.0.1").expect("the IP address verifies");
        assert!(verify("driftgate.elsewhere.svc").is_err());
        // Expires when asked, to the second.
        assert_eq!(generation.not_after.as_second(), now.as_second() + 3600);
    }
}
