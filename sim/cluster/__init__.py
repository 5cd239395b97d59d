"""The cluster layer: many replicas in one SimPy environment, and the router process in front.

| module | owns |
|--------|------|
| `replica.py` | one replica: its world and inbox; what a router observes of it |
| `routing.py` | the router process: arrivals and aborts in time order, each routed once, decisions logged |
| `tables.py` | the cluster's tables: routing, per-replica load over time, merged tables, KV transfers |
| `interconnect.py` | interconnect specs (bandwidth, latency) and the KV bytes a transfer moves |
| `link.py` | the shared link: concurrent transfers split each NIC direction's bandwidth |
| `transfers.py` | KV transfers between the pools: announced sends, loads, delivery to both sides |
| `pd.py` | prefill/decode disaggregation: the hand-off to the decode pool, the replicas' inbox bound |

Each replica is a `schedsim.worlds.simpy_world.SimWorld` sharing the environment; its inputs are an
`Inbox` the router process feeds. Imports the worlds, metrics, engine and policies (routers
included), never the run layer above it.
"""
