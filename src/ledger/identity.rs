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
