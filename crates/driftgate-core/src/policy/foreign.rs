//! Documents that are not policy files but are often mistaken for one: other admission engines'
//! policies, and a GatePolicy object as the API server returns it. Each is named in one
//! sentence that says what driftgate expects instead.

use super::document::{API_VERSION, KIND};

/// Where the README explains what a policy file holds.
const README_POLICY: &str = "see README.md, \"The policy\"";

/// The sentence for another engine's policy (`apiVersion` and `kind` as written), or None when
/// the document is not one.
pub fn other_engine(api_version: &str, kind: &str) -> Option<String> {
    let group = api_version.split_once('/').map_or("", |(group, _)| group);
    let what = if group == "kyverno.io" || group.ends_with(".kyverno.io") {
        format!("a Kyverno {kind} ({api_version}), which Kyverno enforces")
    } else if group == "templates.gatekeeper.sh" {
        format!(
            "an OPA Gatekeeper {kind} ({api_version}), a Rego template that Gatekeeper enforces"
        )
    } else if group == "constraints.gatekeeper.sh" {
        format!("an OPA Gatekeeper constraint ({kind}, {api_version}), which Gatekeeper enforces")
    } else if group.ends_with("gatekeeper.sh") {
        format!("an OPA Gatekeeper {kind} ({api_version}), which Gatekeeper reads")
    } else if group == "admissionregistration.k8s.io" {
        format!("a Kubernetes {kind} ({api_version}), which the API server applies itself")
    } else {
        return None;
    };
    Some(format!(
        "this is {what}, not a driftgate policy; driftgate reads documents of apiVersion \
         {API_VERSION}, kind {KIND}, naming the namespaces it guards and the controllers that \
         may write them ({README_POLICY})"
    ))
}

/// The sentence for a mapping with neither apiVersion nor kind (a values file, a config).
pub fn not_an_object() -> String {
    format!(
        "has neither apiVersion nor kind, so it is no Kubernetes object, let alone a policy; a \
         policy starts with apiVersion: {API_VERSION} and kind: {KIND} ({README_POLICY})"
    )
}

/// The fields the API server adds to an object, which a policy file does not have.
pub fn is_server_field(path: &str) -> bool {
    path == "status"
        || path.strip_prefix("metadata.").is_some_and(|field| {
            matches!(
                field,
                "uid"
                    | "resourceVersion"
                    | "generation"
                    | "creationTimestamp"
                    | "deletionTimestamp"
                    | "deletionGracePeriodSeconds"
                    | "managedFields"
                    | "selfLink"
                    | "finalizers"
                    | "ownerReferences"
            )
        })
}

/// The sentence for a GatePolicy object read back from a cluster (`fields`: the server's
/// fields it has, as paths).
pub fn exported_object(fields: &[String]) -> String {
    format!(
        "this is a GatePolicy object as the API server returns it (it has {}), not a policy \
         file: a file holds only apiVersion, kind, metadata.name, labels, annotations and spec, \
         so remove those fields, or keep it as an object for `kubectl apply` and `serve \
         --gatepolicies` ({README_POLICY}); its spec was checked as a file's would be",
        fields.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_engines_are_named() {
        for (api_version, kind, name) in [
            ("kyverno.io/v1", "ClusterPolicy", "Kyverno ClusterPolicy"),
            ("kyverno.io/v2beta1", "Policy", "Kyverno Policy"),
            (
                "templates.gatekeeper.sh/v1",
                "ConstraintTemplate",
                "OPA Gatekeeper ConstraintTemplate",
            ),
            (
                "constraints.gatekeeper.sh/v1beta1",
                "K8sRequiredLabels",
                "OPA Gatekeeper constraint (K8sRequiredLabels",
            ),
            (
                "admissionregistration.k8s.io/v1",
                "ValidatingAdmissionPolicy",
                "Kubernetes ValidatingAdmissionPolicy",
            ),
        ] {
            let sentence = other_engine(api_version, kind).unwrap();
            assert!(sentence.contains(name), "{sentence}");
            assert!(sentence.contains(API_VERSION), "{sentence}");
        }
        assert_eq!(other_engine(API_VERSION, KIND), None);
        assert_eq!(other_engine("v1", "ConfigMap"), None);
    }

    #[test]
    fn server_fields_are_the_api_servers_own() {
        assert!(is_server_field("status"));
        assert!(is_server_field("metadata.uid"));
        assert!(is_server_field("metadata.managedFields"));
        assert!(!is_server_field("metadata.labels"));
        assert!(!is_server_field("spec.status"));
    }
}
