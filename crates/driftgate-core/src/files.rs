//! Reviews and objects read from the files a command line names (`eval`, `policy test`):
//! what fails is said with the file's name. Above `review`, which parses bytes.

use std::path::{Path, PathBuf};

use kube_core::DynamicObject;
use kube_core::admission::AdmissionRequest;

use crate::error::{Error, Result};
use crate::review::parse_review;

/// Reads a review from a file.
pub fn read_review(path: &Path) -> Result<AdmissionRequest<DynamicObject>> {
    let (body, name) = read_review_body(path)?;
    parse_review(&body).map_err(|source| Error::Review { path: name, source })
}

/// The bytes of a review file, and the file's name for errors about it: `-` is standard input
/// (`kubectl get ... | driftgate eval -`), named so.
pub fn read_review_body(path: &Path) -> Result<(Vec<u8>, PathBuf)> {
    let (body, name) = if path == Path::new("-") {
        let mut body = Vec::new();
        let read = std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut body);
        (read.map(|_| body), Path::new("standard input"))
    } else {
        (std::fs::read(path), path)
    };
    let body = body.map_err(|source| Error::Read {
        path: name.to_owned(),
        source,
    })?;
    Ok((body, name.to_owned()))
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
