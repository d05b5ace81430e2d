//! A serving certificate and its key, read from PEM and checked (parsable, key matches the
//! certificate) before anything serves them: files given to `serve`, and the pairs kept in the
//! runtime-mode Secret. Pure: the caller reads the bytes.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::InconsistentKeys;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject, SectionKind};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::ParsedCertificate;
use rustls::sign::CertifiedKey;

use crate::error::{Error, Result};

/// The certificate chain and private key files (PEM), e.g. a mounted `kubernetes.io/tls` Secret.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The provider our server configs use. Chosen explicitly rather than taken from the process
/// default, so a config is the same whether or not `install_crypto_provider` ran first.
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

pub fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })
}

pub fn tls_error(path: &Path, reason: impl Into<String>) -> Error {
    Error::Tls {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// The PEM sections in `pem` (read from `path`), of any kind, in file order; a section that
/// does not parse is an error naming the file.
pub fn pem_sections<'a>(
    path: &'a Path,
    pem: &'a [u8],
) -> impl Iterator<Item = Result<(SectionKind, Vec<u8>)>> + 'a {
    <(SectionKind, Vec<u8>)>::pem_slice_iter(pem).map(move |section| {
        section.map_err(|e| {
            tls_error(
                path,
                format!(
                    "is not valid PEM ({}); is the file complete?",
                    pem_problem(&e)
                ),
            )
        })
    })
}

/// What is wrong with a PEM text, in words: pki-types prints the marker lines as byte lists,
/// which no one can read, so they are shown as text here.
pub fn pem_problem(error: &pem::Error) -> String {
    match error {
        // `end_marker` holds only the label, e.g. `CERTIFICATE`.
        pem::Error::MissingSectionEnd { end_marker } => format!(
            "no -----END {}----- line",
            String::from_utf8_lossy(end_marker)
        ),
        pem::Error::IllegalSectionStart { line } => {
            format!("illegal section start: {:?}", String::from_utf8_lossy(line))
        }
        other => other.to_string(),
    }
}

/// Parses the PEM certificate chain in `pem` (read from `path`): at least one certificate,
/// leaf first, each one well-formed DER.
pub fn parse_cert_chain(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>> {
    let mut chain = Vec::new();
    for section in pem_sections(path, pem) {
        match section? {
            (SectionKind::Certificate, der) => chain.push(CertificateDer::from(der)),
            // A certificate file is treated as public (copied into caBundles, pasted in
            // tickets), so a key in it is a leak waiting to happen: refuse it.
            (
                SectionKind::PrivateKey | SectionKind::RsaPrivateKey | SectionKind::EcPrivateKey,
                _,
            ) => {
                return Err(tls_error(
                    path,
                    "holds a private key; the certificate file must hold only the PEM \
                     certificate chain (leaf first), and the key its own file",
                ));
            }
            _ => {}
        }
    }
    if chain.is_empty() {
        return Err(tls_error(
            path,
            "holds no certificate (no -----BEGIN CERTIFICATE----- block); expected the PEM \
             certificate chain, leaf first",
        ));
    }
    // PEM only says the base64 decodes; parse the DER too, so a corrupt certificate is refused
    // here rather than failing every handshake later.
    for (index, cert) in chain.iter().enumerate() {
        if let Err(e) = ParsedCertificate::try_from(cert) {
            return Err(tls_error(
                path,
                format!(
                    "certificate {} of {} is not a valid X.509 certificate: {e}",
                    index + 1,
                    chain.len()
                ),
            ));
        }
    }
    Ok(chain)
}

/// Parses the one private key in `pem` (read from `path`): PKCS#8, PKCS#1 or SEC1.
fn parse_private_key(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>> {
    let mut keys: Vec<PrivateKeyDer<'static>> = Vec::new();
    for section in pem_sections(path, pem) {
        let (kind, der) = section?;
        // `from_pem` keeps the three private-key kinds (PKCS#8, PKCS#1, SEC1) and drops the rest.
        keys.extend(PrivateKeyDer::from_pem(kind, der));
    }
    match keys.len() {
        0 => Err(tls_error(
            path,
            "holds no private key (no -----BEGIN PRIVATE KEY----- or EC/RSA PRIVATE KEY \
             block); expected the PEM private key of the serving certificate",
        )),
        // Which of several keys was meant is a guess we should not make.
        1 => Ok(keys.pop().expect("one key")),
        n => Err(tls_error(
            path,
            format!("holds {n} private keys; keep only the key of the serving certificate"),
        )),
    }
}

/// Parses and checks a serving pair (parsable, key matches certificate); `files` name where
/// the PEM came from in any error (a Secret's keys are named the same way as files).
pub fn certified_key_from_pem(files: &TlsFiles, cert: &[u8], key: &[u8]) -> Result<CertifiedKey> {
    let chain = parse_cert_chain(&files.cert, cert)?;
    let key = parse_private_key(&files.key, key)?;
    let signing_key = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| tls_error(&files.key, format!("is not a usable private key: {e}")))?;
    let certified = CertifiedKey::new(chain, signing_key);
    match certified.keys_match() {
        Ok(()) => Ok(certified),
        Err(rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
            Err(Error::TlsKeyMismatch {
                cert: files.cert.clone(),
                key: files.key.clone(),
            })
        }
        // Includes "cannot tell" (a key that does not reveal its public half): serving a pair
        // we could not check is how a mismatch reaches production.
        Err(e) => Err(tls_error(
            &files.key,
            format!(
                "cannot be checked against the certificate in {}: {e}",
                files.cert.display()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CERT_START: &[u8] = b"-----BEGIN CERTIFICATE-----\nMIIB\n";

    #[test]
    fn a_cut_off_certificate_names_the_missing_end_line() {
        let error = parse_cert_chain(Path::new("tls.crt"), CERT_START).unwrap_err();
        assert_eq!(
            error.to_string(),
            "tls.crt: is not valid PEM (no -----END CERTIFICATE----- line); is the file complete?"
        );
    }

    #[test]
    fn a_broken_begin_line_is_quoted_as_text() {
        let error = parse_private_key(Path::new("tls.key"), b"-----BEGIN PRIVATE KEY---\n")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("illegal section start: \"-----BEGIN PRIVATE KEY---\""),
            "{error}"
        );
    }
}
