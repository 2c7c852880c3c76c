"""tests/e2e/test_nodes_api.py - the per-node view of a store of independent
nodes (redlock://) stays out of every other store's answers: /readyz has no
"nodes" object and /metrics no lockd_store_node_* family, and a shared
acquire with a limit above 1 (refused on redlock://, which cannot bound the
holders) is a grant. The redlock:// side is checked by the redlock
scenarios, on real Redis servers.
"""

import harness
from client import expect_free, expect_grant, expect_json, req
from harness import check, eq

NOT_NODES = ["memory", "redis", "zookeeper", "mysql"]


@harness.scenario("nodes: a store without nodes shows none on /readyz and /metrics and keeps semaphores",
                  backends=NOT_NODES)
def test_no_nodes_view(ctx):
    r = ctx.lockd.request("GET", "/readyz")
    body = expect_json(r, 200, "readyz")
    eq(body.get("backend"), ctx.backend, "readyz backend")
    check("nodes" not in body, "readyz of %s has a nodes object: %r" % (ctx.backend, body))
    r = ctx.lockd.request("GET", "/metrics")
    eq(r.status, 200, "metrics status")
    check("lockd_store_node_" not in r.text,
          "metrics of %s has per-node families: %r" % (ctx.backend,
                                                       [l for l in r.text.splitlines() if "store_node" in l][:5]))
    key = ctx.key("sem")
    grants = []
    for i in range(2):
        r = req(ctx, "POST", key, {"mode": "shared", "limit": 2, "ttl_ms": 10000})
        grants.append(expect_grant(r, key, 10000, what="semaphore grant %d" % (i + 1)))
        eq(grants[-1].get("limit"), 2, "semaphore grant %d limit" % (i + 1))
    for g in grants:
        r = req(ctx, "DELETE", key, headers={"Lock-Token": g["token"]})
        expect_json(r, 200, "release")
    expect_free(ctx, key)
