//! Reading AdmissionReviews as the API server sends them, and Kubernetes objects from files.

use std::path::Path;

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};

use crate::error::{Error, Result};

pub const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";
pub const ADMISSION_KIND: &str = "AdmissionReview";

/// Why a body is not an AdmissionReview driftgate can answer.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("not a valid AdmissionReview: {0}")]
    Json(#[from] serde_json::Error),
    #[error(
        "apiVersion \"{0}\" is not supported: driftgate answers {ADMISSION_API_VERSION} AdmissionReview only (set admissionReviewVersions: [v1])"
    )]
    UnsupportedVersion(String),
    #[error("kind \"{0}\" is not an AdmissionReview")]
    WrongKind(String),
    #[error("the AdmissionReview has no request")]
    MissingRequest,
}

/// Parses an `admission.k8s.io/v1` AdmissionReview and returns its request.
pub fn parse_review(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, ReviewError> {
    let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(body) {
        Ok(review) => review,
        // An older review version fails to parse as v1; say which version it was, which is the
        // actionable part. Only the error path pays for the second parse.
        Err(error) => {
            #[derive(serde::Deserialize)]
            #[serde(rename_all = "camelCase")]
            struct Header {
                api_version: String,
            }
            return Err(match serde_json::from_slice::<Header>(body) {
                Ok(header) if header.api_version != ADMISSION_API_VERSION => {
                    ReviewError::UnsupportedVersion(header.api_version)
                }
                _ => ReviewError::Json(error),
            });
        }
    };
    if review.types.api_version != ADMISSION_API_VERSION {
        return Err(ReviewError::UnsupportedVersion(review.types.api_version));
    }
    if review.types.kind != ADMISSION_KIND {
        return Err(ReviewError::WrongKind(review.types.kind));
    }
    let mut request: AdmissionRequest<DynamicObject> =
        review.try_into().map_err(|_| ReviewError::MissingRequest)?;
    name_from_object(&mut request);
    Ok(request)
}

/// A DELETE of a collection reviews each object with an empty `name` (measured on
/// kube-apiserver 1.35; only `oldObject` names it): take the name from the object, so that
/// messages, Events and backport records say which object it was. A request with no named
/// object keeps its empty name.
fn name_from_object(request: &mut AdmissionRequest<DynamicObject>) {
    if !request.name.is_empty() {
        return;
    }
    let named = [request.old_object.as_ref(), request.object.as_ref()]
        .into_iter()
        .flatten()
        .find_map(|o| o.metadata.name.clone().filter(|n| !n.is_empty()));
    if let Some(name) = named {
        request.name = name;
    }
}

/// Reads a review from a file.
pub fn read_review(path: &Path) -> Result<AdmissionRequest<DynamicObject>> {
    let body = std::fs::read(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })?;
    parse_review(&body).map_err(|source| Error::Review {
        path: path.to_owned(),
        source,
    })
}

/// Reads one Kubernetes object from a YAML or JSON file (a Namespace, a parent object).
pub fn read_object(path: &Path) -> Result<DynamicObject> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })?;
    let fail = |reason: String| Error::Object {
        path: path.to_owned(),
        reason,
    };
    // JSON first: it is what `kubectl get -o json` writes, and serde_json's errors are precise.
    let object: DynamicObject = if text.trim_start().starts_with('{') {
        serde_json::from_str(&text).map_err(|e| fail(e.to_string()))?
    } else {
        let value: serde_json::Value =
            serde_saphyr::from_str(&text).map_err(|e| fail(e.to_string()))?;
        serde_json::from_value(value).map_err(|e| fail(e.to_string()))?
    };
    if object.types.as_ref().is_none_or(|t| t.kind.is_empty()) {
        return Err(fail("it has no kind".into()));
    }
    Ok(object)
}
