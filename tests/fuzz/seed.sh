#!/usr/bin/env bash
# Seeds the fuzz corpora from the fixtures (run from the repository root, before the first run;
# the committed corpus already holds these seeds and what the runs added, minimized).
#
# admission_review: every fixture review, minified and without metadata.managedFields, which is
# most of their bytes and which the decision does not read; small seeds keep libFuzzer's
# mutations on the parts that matter and the corpus small (the structure-aware target mutates
# the full fixtures).
# policy_load: every policy file in the repository, valid and invalid.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=tests/fuzz/corpus
mkdir -p "$out/admission_review" "$out/policy_load" "$out/admission_review_structured"
for fixture in tests/fixtures/*.json; do
  jq -c 'del(.request.object.metadata.managedFields, .request.oldObject.metadata.managedFields)' \
    "$fixture" > "$out/admission_review/seed-$(basename "$fixture")"
done
for policy in policies/*.yaml policies/tests/argocd.yaml tests/fixtures/policies/*.yaml \
  tests/e2e/ledger-policy.yaml; do
  cp "$policy" "$out/policy_load/seed-$(basename "$policy")"
done
