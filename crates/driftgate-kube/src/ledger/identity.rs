//! Who this client is, as the API server authenticates it: a `SelfSubjectReview` (every
//! authenticated user may create one). `serve` uses it for its own identity when
//! `--service-account` is not given; `backlog resolve` to write its resolver's name.

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::{Api, PostParams};

/// Why the API server did not say who we are.
#[derive(Debug, thiserror::Error)]
pub enum WhoAmIError {
    #[error("the API server refused the SelfSubjectReview: {0}")]
    Refused(#[from] kube::Error),
    #[error("the API server's SelfSubjectReview names no user")]
    NoUser,
}

/// The username the API server sees for `client`.
pub async fn who_am_i(client: kube::Client) -> Result<String, WhoAmIError> {
    let api: Api<SelfSubjectReview> = Api::all(client);
    let review = api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await?;
    review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .filter(|u| !u.is_empty())
        .ok_or(WhoAmIError::NoUser)
}

/// The namespace of a service account's username (`system:serviceaccount:NS:NAME`): where
/// driftgate keeps the records of windows on cluster-scoped objects, which have no namespace of
/// their own. None for any other username.
pub fn service_account_namespace(username: &str) -> Option<&str> {
    let rest = username.strip_prefix("system:serviceaccount:")?;
    let (namespace, name) = rest.split_once(':')?;
    (!namespace.is_empty() && !name.is_empty() && !name.contains(':')).then_some(namespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_accounts_namespace_is_read_from_its_username() {
        assert_eq!(
            service_account_namespace("system:serviceaccount:driftgate:driftgate"),
            Some("driftgate")
        );
        for other in [
            "alice",
            "system:serviceaccount:driftgate",
            "system:serviceaccount::x",
            "system:serviceaccount:a:b:c",
            "system:kube-controller-manager",
        ] {
            assert_eq!(service_account_namespace(other), None, "{other}");
        }
    }
}
