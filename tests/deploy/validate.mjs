// tests/deploy/validate.mjs - validates Kubernetes objects against the
// OpenAPI schemas of Kubernetes (kubernetes-models) and of the Prometheus
// Operator (ServiceMonitor, PrometheusRule).
//
//   node validate.mjs < objects.json     (a JSON array of objects)
//
// Prints "ok KIND/NAME" or "invalid KIND/NAME: why" per object and exits 1
// when any is invalid or of a kind it has no schema for. The packages come
// from `npm ci` in this folder (package-lock.json pins them).
import { readFileSync } from "node:fs";

const roots = {
  "": "kubernetes-models",
  "monitoring.coreos.com": "@kubernetes-models/prometheus-operator",
};

async function modelFor(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  const pkg = roots[group] ?? "kubernetes-models";
  const dir = group === "" ? version : `${group}/${version}`;
  // through the package's exports map ("./apps/v1/*"), which names the
  // ES module file whatever the package version calls it
  const mod = await import(`${pkg}/${dir}/${kind}`);
  return mod[kind];
}

const objects = JSON.parse(readFileSync(0, "utf8"));
let bad = 0;
for (const obj of objects) {
  const what = `${obj.kind}/${obj.metadata?.name}`;
  let Model;
  try {
    Model = await modelFor(obj.apiVersion, obj.kind);
  } catch (e) {
    Model = undefined;
  }
  if (!Model) {
    console.log(`invalid ${what}: no schema for ${obj.apiVersion} ${obj.kind}`);
    bad++;
    continue;
  }
  try {
    new Model(obj).validate();
    console.log(`ok ${what}`);
  } catch (e) {
    console.log(`invalid ${what}: ${e.message}`);
    bad++;
  }
}
process.exit(bad ? 1 : 0);
