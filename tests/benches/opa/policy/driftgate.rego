# driftgate's decision (README "The decision", rules 1-8) in Rego, as the peer that
# tests/benches/load.sh runs under the same load as `driftgate serve`. OPA answers the
# AdmissionReview itself: `opa run --server --set=default_decision=driftgate/main` makes this
# package's `main` the answer to `POST /`.
#
# It is meant to decide as driftgate does with `--no-kube` (no Namespace objects, no parent
# lookups), on the policies in gate_policies.rego (policies/example.yaml). Left out: deletions
# (allow-deletion, controllerLimit), suspensions, the ledger's rules for driftgate.dev records,
# and managedFields forgery; the fixtures that show them are listed, with the reason, in
# ../differences.json, and load.sh stops on any other difference. Known differences besides:
# - A field is "changed" when the normalised objects differ; driftgate also treats a key that
#   is null on one side and absent on the other as unchanged below `metadata`; this does not.
# - Field globs in delegations (`containers[*].image`) are not supported: fields are exact
#   paths, which is all policies/example.yaml uses.
# - Denial messages are one short sentence, not driftgate's full instructions.
package driftgate

import rego.v1

req := input.request

requested_subresource := object.get(req, "subResource", "")

# Judged by effect, not by path (README, rule 1): a subresource UPDATE that carries the parent
# object itself (`status`, `finalize`; not a `Scale`) and changes more than the subresource's
# own part (`status`, which `normalised` leaves out) is a write to the object. Without a
# cluster, driftgate knows the parent's kind only for the well-known resources; otherwise the
# objects count when they are of the resource's group and not a Scale.
through if {
	requested_subresource != ""
	req.operation == "UPDATE"
	is_object(req.object)
	is_object(req.oldObject)
	carries_parent
	changed
}

carries_parent if req.kind.kind == well_known_kinds[concat("/", [req.resource.group, req.resource.resource])]

carries_parent if {
	not well_known_kinds[concat("/", [req.resource.group, req.resource.resource])]
	req.kind.group == req.resource.group
	req.kind.kind != "Scale"
}

# The subresource the write is judged as: "" for the object itself.
subresource := "" if through

else := requested_subresource

username := object.get(req.userInfo, "username", "")

user_groups := object.get(req.userInfo, "groups", [])

# The field manager is the client's choice; an empty one is no field manager.
field_manager := fm if {
	fm := req.options.fieldManager
	is_string(fm)
	fm != ""
}

# The namespace that scopes the write; a Namespace object scopes itself.
scope_namespace := req.namespace if {
	is_string(req.namespace)
	req.namespace != ""
} else := req.name if {
	req.kind.group == ""
	req.kind.kind == "Namespace"
	req.name != ""
}

well_known_kinds := {
	"apps/deployments": "Deployment",
	"apps/statefulsets": "StatefulSet",
	"apps/replicasets": "ReplicaSet",
	"/replicationcontrollers": "ReplicationController",
}

# The kind written; for a subresource, its parent's kind.
kind := req.kind.kind if {
	subresource == ""
} else := known if {
	known := well_known_kinds[concat("/", [req.resource.group, req.resource.resource])]
} else := req.resource.resource

api_group := "core" if {
	req.resource.group == ""
} else := req.resource.group

# Most patterns are plain names: compare those directly, and leave glob.match (which costs
# microseconds a call, the larger part of this policy's evaluation) to real globs.
globs_match(patterns, value) if value in patterns

globs_match(patterns, value) if {
	some pattern in patterns
	is_glob(pattern)
	glob.match(pattern, null, value)
}

is_glob(pattern) if contains(pattern, "*")

is_glob(pattern) if contains(pattern, "?")

is_glob(pattern) if contains(pattern, "[")

is_glob(pattern) if contains(pattern, "{")

# Events and driftgate's own records are never guarded, whatever a policy says.
never_guarded if api_group == "driftgate.dev"

never_guarded if {
	kind == "Event"
	api_group in {"core", "events.k8s.io"}
}

resource_names := [concat("/", [api_group, kind]), concat("/", [api_group, req.resource.resource])]

in_scope(p) if {
	req.operation in p.operations
	subresource in p.subresources
	ns := scope_namespace
	not globs_match(p.namespaces.exclude, ns)
	globs_match(p.namespaces.include, ns)
	not never_guarded
	some included in resource_names
	globs_match(p.resources.include, included)
	not resource_excluded(p)
}

resource_excluded(p) if {
	some name in resource_names
	globs_match(p.resources.exclude, name)
}

identity_matches(who) if globs_match(who.usernames, username)

identity_matches(who) if {
	some group in user_groups
	globs_match(who.groups, group)
}

# Rule 2: a controller's field manager used by anyone but that controller.
spoofing(p) if {
	fm := field_manager
	claimed := [c | some c in p.controllers; globs_match(c.fieldManagers, fm)]
	count(claimed) > 0
	not any_identity(claimed)
}

any_identity(controllers) if {
	some c in controllers
	identity_matches(c)
}

controller_field_manager_ok(_) if not field_manager

controller_field_manager_ok(c) if count(c.fieldManagers) == 0

controller_field_manager_ok(c) if globs_match(c.fieldManagers, field_manager)

is_controller(p) if {
	some c in p.controllers
	identity_matches(c)
	controller_field_manager_ok(c)
}

# --- What an UPDATE changes -----------------------------------------------------------------

or_default(value, default_value) := default_value if {
	value == null
} else := value

# The object as driftgate compares it: `status` and the API server's bookkeeping in
# `metadata` left out, absent and empty label/annotation maps and lists alike.
normalised(obj) := object.union(object.remove(obj, ["metadata", "status"]), {"metadata": {
	"labels": or_default(object.get(meta, "labels", {}), {}),
	"annotations": or_default(object.get(meta, "annotations", {}), {}),
	"finalizers": or_default(object.get(meta, "finalizers", []), []),
	"ownerReferences": or_default(object.get(meta, "ownerReferences", []), []),
	"name": object.get(meta, "name", null),
	"generateName": object.get(meta, "generateName", null),
	"namespace": object.get(meta, "namespace", null),
}}) if {
	meta := or_default(object.get(obj, "metadata", {}), {})
}

old_norm := normalised(req.oldObject) if {
	req.operation == "UPDATE"
	is_object(req.oldObject)
}

new_norm := normalised(req.object) if {
	req.operation == "UPDATE"
	is_object(req.object)
}

changed if old_norm != new_norm

# Every change lies within `paths` (lists of path segments): the objects are equal once those
# fields are removed from both.
only_within(paths) if {
	changed
	json.remove(old_norm, paths) == json.remove(new_norm, paths)
}

# --- Break-glass windows --------------------------------------------------------------------

now_ns := time.now_ns()

expiry_ns(value) := ns if {
	regex.match(`^[0-9]{8}T[0-9]{4}Z$`, value)
	ns := time.parse_ns("20060102T1504Z", value)
} else := ns if {
	regex.match(`^[0-9]{8}T[0-9]{6}Z$`, value)
	ns := time.parse_ns("20060102T150405Z", value)
}

latest_expiry_ns(rules) := now_ns + time.parse_duration_ns(rules.maxDuration)

labels_of(meta) := or_default(object.get(meta, "labels", {}), {})

annotations_of(meta) := or_default(object.get(meta, "annotations", {}), {})

# The stored object whose label may carry a window. A subresource's parent is never fetched
# (driftgate --no-kube does not either), and a CREATE has no stored object.
stored_meta := req.oldObject.metadata if {
	subresource == ""
	req.operation in {"UPDATE", "DELETE"}
}

new_meta := req.object.metadata

window_state(meta, rules) := "absent" if not labels_of(meta)[rules.label]

else := "malformed" if not expiry_ns(labels_of(meta)[rules.label])

else := "expired" if expiry_ns(labels_of(meta)[rules.label]) <= now_ns

else := "toolong" if expiry_ns(labels_of(meta)[rules.label]) > latest_expiry_ns(rules)

else := "open"

object_window(rules) := window_state(stored_meta, rules)

is_opener(rules) if identity_matches(rules.openers)

break_glass_paths(rules) := [
	["metadata", "labels", rules.label],
	["metadata", "annotations", rules.reasonAnnotation],
]

touches_break_glass(rules) if labels_of(old_norm.metadata)[rules.label] != labels_of(new_norm.metadata)[rules.label]

touches_break_glass(rules) if {
	# Present on one side only.
	old_has := rules.label in object.keys(labels_of(old_norm.metadata))
	new_has := rules.label in object.keys(labels_of(new_norm.metadata))
	old_has != new_has
}

touches_break_glass(rules) if annotations_of(old_norm.metadata)[rules.reasonAnnotation] != annotations_of(new_norm.metadata)[rules.reasonAnnotation]

touches_break_glass(rules) if {
	old_has := rules.reasonAnnotation in object.keys(annotations_of(old_norm.metadata))
	new_has := rules.reasonAnnotation in object.keys(annotations_of(new_norm.metadata))
	old_has != new_has
}

closes_window_only(rules) if {
	req.operation == "UPDATE"
	subresource == ""
	only_within(break_glass_paths(rules))
	not labels_of(new_meta)[rules.label]
}

# The placeholder of driftgate's hints (`INC-…: what and why`), copied instead of replaced.
placeholder_reason(rules) if contains(annotations_of(new_meta)[rules.reasonAnnotation], "…")

placeholder_reason(rules) if contains(lower(annotations_of(new_meta)[rules.reasonAnnotation]), "what and why")

reason_given(rules) if trim_space(annotations_of(new_meta)[rules.reasonAnnotation]) != ""

old_label(rules) := labels_of(stored_meta)[rules.label]

new_label(rules) := labels_of(new_meta)[rules.label]

# Rule 6: what a change of the label or reason is, or why it is refused.
break_glass_change(rules) := "refused" if {
	old_label(rules)
	not new_label(rules)
	not is_opener(rules)
} else := "BreakGlassClosed" if {
	old_label(rules)
	not new_label(rules)
} else := "refused" if {
	old_label(rules) == new_label(rules)
	not is_opener(rules)
} else := "refused" if {
	old_label(rules) == new_label(rules)
	rules.requireReason
	not reason_given(rules)
} else := "BreakGlassAmended" if {
	old_label(rules) == new_label(rules)
} else := "refused" if {
	new_label(rules)
	not is_opener(rules)
} else := "refused" if {
	not expiry_ns(new_label(rules))
	new_label(rules)
} else := "refused" if {
	expiry_ns(new_label(rules)) <= now_ns
} else := "refused" if {
	expiry_ns(new_label(rules)) > latest_expiry_ns(rules)
} else := "refused" if {
	new_label(rules)
	rules.requireReason
	not reason_given(rules)
} else := "refused" if {
	new_label(rules)
	placeholder_reason(rules)
} else := "BreakGlassExtended" if {
	new_label(rules)
	window_state(stored_meta, rules) == "open"
} else := "BreakGlassOpened" if {
	new_label(rules)
} else := "BreakGlassAmended" if {
	is_opener(rules)
} else := "refused"

# --- One policy's verdict -------------------------------------------------------------------

admit(name) := {"rule": name, "admit": true}

deny(name) := {"rule": name, "admit": false}

outcome(p) := deny("FieldManagerSpoofing") if spoofing(p)

else := controller_outcome(p) if is_controller(p)

else := admit("Delegation") if delegated(p)

else := admit("NoEffectiveChange") if {
	req.operation == "UPDATE"
	not changed
}

else := deny("NotPermitted") if not p.breakGlass

else := deny("BreakGlassRefused") if {
	break_glass_update(p.breakGlass)
	break_glass_change(p.breakGlass) == "refused"
}

else := admit(break_glass_change(p.breakGlass)) if {
	break_glass_update(p.breakGlass)
	only_within(break_glass_paths(p.breakGlass))
}

else := window_outcome(p.breakGlass)

# The controller whose write this is; a window holds it unless it says `heldByWindows: false`.
held_by_windows(p) if {
	some c in p.controllers
	identity_matches(c)
	controller_field_manager_ok(c)
	object.get(c, "heldByWindows", true)
}

controller_outcome(p) := admit("Controller") if not held_by_windows(p)

else := admit("BreakGlassClosed") if {
	p.breakGlass.holdController
	object_window(p.breakGlass) == "open"
	closes_window_only(p.breakGlass)
} else := deny("ControllerHeld") if {
	p.breakGlass.holdController
	object_window(p.breakGlass) == "open"
} else := admit("Controller")

delegated(p) if {
	req.operation == "UPDATE"
	some d in p.delegations
	identity_matches(d)
	subresource in d.subresources
	only_within(d.fields)
}

break_glass_update(rules) if {
	req.operation == "UPDATE"
	subresource == ""
	touches_break_glass(rules)
}

# Rule 7, then the expired and too-long windows, then rule 8.
window_outcome(rules) := admit("BreakGlassWindow") if {
	object_window(rules) == "open"
	is_opener(rules)
} else := deny("NotPermitted") if {
	object_window(rules) == "open"
} else := deny("WindowTooLong") if {
	object_window(rules) == "toolong"
} else := deny("WindowExpired") if {
	object_window(rules) == "expired"
} else := deny("NotPermitted")

# An Audit policy admits what it would deny, and says so.
verdict(p, o) := {"policy": p.name, "rule": o.rule, "allowed": true, "would_deny": false} if {
	o.admit
} else := {"policy": p.name, "rule": o.rule, "allowed": true, "would_deny": true} if {
	p.mode == "Audit"
} else := {"policy": p.name, "rule": o.rule, "allowed": false, "would_deny": false}

verdicts := [verdict(p, outcome(p)) | some p in gate_policies; in_scope(p)]

allowed if every v in verdicts {
	v.allowed
}

deciding := [v | some v in verdicts; not v.allowed] if not allowed

else := [v | some v in verdicts; v.would_deny] if {
	some v in verdicts
	v.would_deny
} else := verdicts

rule := deciding[0].rule if count(deciding) > 0

else := "OutOfScope"

decision_word := "denied" if not allowed

else := "allowed-audit" if {
	some v in verdicts
	v.would_deny
} else := "allowed"

audit_annotations := {"decision": decision_word, "rule": rule, "policy": concat(",", [v.policy | some v in deciding])} if count(deciding) > 0

else := {"decision": decision_word, "rule": rule}

operation_word := {"CREATE": "create", "UPDATE": "update", "DELETE": "delete", "CONNECT": "connect to"}[req.operation]

denial := sprintf("%s may not %s %s %s/%s (policy %q, rule %s). Change it in Git, or open a break-glass window.", [
	username, operation_word, kind, object.get(req, "namespace", ""), object.get(req, "name", ""),
	deciding[0].policy, rule,
])

response := {
	"uid": req.uid,
	"allowed": false,
	"status": {"code": 403, "reason": "Forbidden", "message": denial},
	"auditAnnotations": audit_annotations,
} if not allowed

else := {
	"uid": req.uid,
	"allowed": true,
	"auditAnnotations": audit_annotations,
}

main := {
	"apiVersion": "admission.k8s.io/v1",
	"kind": "AdmissionReview",
	"response": response,
}
