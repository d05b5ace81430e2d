//! The test cluster's certificates, made with rcgen: one CA that signs the API server's serving
//! certificate and every client certificate (the API server trusts it as `--client-ca-file`),
//! another that signs only the client certificate the API server presents to webhooks, and the
//! service-account signing key.

use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, SanType,
};

/// A PEM certificate and its PEM (PKCS#8) private key.
pub struct Pair {
    pub cert: String,
    pub key: String,
}

pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

fn key() -> KeyPair {
    KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("an ECDSA P-256 key generates")
}

/// Valid from an hour ago (clock skew) for a day: longer than any test run.
fn validity(params: &mut CertificateParams) {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970");
    params.not_before = rcgen::date_time_ymd(1970, 1, 1) + since_epoch - Duration::from_secs(3600);
    params.not_after = params.not_before + Duration::from_secs(25 * 3600);
}

impl Ca {
    pub fn new() -> Ca {
        Ca::named("driftgate e2e CA")
    }

    /// A CA whose certificate's CN is `common_name`.
    pub fn named(common_name: &str) -> Ca {
        let mut params = CertificateParams::default();
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, common_name);
        params.distinguished_name = name;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut params);
        Ca {
            issuer: CertifiedIssuer::self_signed(params, key()).expect("the CA self-signs"),
        }
    }

    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// A serving certificate for loopback.
    pub fn serving(&self, common_name: &str) -> Pair {
        self.serving_for(common_name, &[], &[])
    }

    /// A serving certificate for loopback and these DNS names and IP addresses too (a Service's
    /// names and ClusterIP, for a server that pods reach).
    pub fn serving_for(&self, common_name: &str, dns_names: &[&str], ips: &[IpAddr]) -> Pair {
        let mut params = CertificateParams::default();
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, common_name);
        params.distinguished_name = name;
        params.subject_alt_names = vec![
            SanType::DnsName("localhost".try_into().expect("a DNS name")),
            SanType::IpAddress(IpAddr::from([127, 0, 0, 1])),
        ];
        for dns_name in dns_names {
            let dns_name = (*dns_name).try_into().expect("a DNS name");
            params.subject_alt_names.push(SanType::DnsName(dns_name));
        }
        params
            .subject_alt_names
            .extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// A client certificate the API server reads as user `user` in `groups` (CN and O).
    ///
    /// rcgen keeps one value per attribute type, so a second group is written under O's OID
    /// as a "custom" type; the API server reads both as groups. More than two are not possible.
    pub fn client(&self, user: &str, groups: &[&str]) -> Pair {
        assert!(
            groups.len() <= 2,
            "rcgen can put at most two groups (O) into a certificate: {groups:?}"
        );
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, user);
        if let Some(group) = groups.first() {
            name.push(DnType::OrganizationName, *group);
        }
        if let Some(group) = groups.get(1) {
            name.push(DnType::CustomDnType(vec![2, 5, 4, 10]), *group);
        }
        let mut params = CertificateParams::default();
        params.distinguished_name = name;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, mut params: CertificateParams) -> Pair {
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        validity(&mut params);
        let key = key();
        let cert = params.signed_by(&key, &self.issuer).expect("rcgen signs");
        Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

/// The service-account token signing key: the private key (PKCS#8 PEM, for
/// `--service-account-signing-key-file`) and its public key (for `--service-account-key-file`,
/// which reads public keys and PKCS#1/SEC1 private keys, not PKCS#8 ones).
pub fn service_account_key() -> Pair {
    let key = key();
    Pair {
        cert: key.public_key_pem(),
        key: key.serialize_pem(),
    }
}
