"""What the Dask plugin counts, and its Prometheus collector.

Dask serves Prometheus metrics at /metrics of its HTTP server (the
dashboard port) when prometheus_client is importable, from
prometheus_client's default registry. The plugin registers one collector
there while it is installed (register() / unregister()), so its figures
appear beside Dask's, named as Dask names its own: the namespace of
distributed.dashboard.prometheus.namespace ("dask"), the subsystem "caps":

  dask_caps_written_frames_total{codec}      frames the codec per link wrote, by
  dask_caps_written_bytes_total{codec}       codec ("none": raw); bytes as sent
  dask_caps_link_choice{peer_kind,codec}     open connections by the peer's role
                                             ("plain": a peer without the plugin)
                                             and their current choice ("unknown":
                                             the link is not measured yet)
  dask_caps_link_choice_changes_total{peer_kind}  how often a connection's choice changed
  dask_caps_recodes_total                    messages recoded for their recipient
  dask_caps_recode_failures_total            messages the core could not recode
                                             (sent unchanged)
  dask_caps_relayed_recodes_total            relayed frames in another codec than
                                             the link's, recoded into the link's
  dask_caps_relayed_recode_failures_total    relayed frames the core could not
                                             decode (sent as they came)
  dask_caps_peers_total{kind}                connections whose peer "published"
                                             capabilities, or was "plain"

Without prometheus_client nothing is registered and nothing changes. The
counters are plain integers updated under the GIL; a scrape reads them.
"""
from __future__ import annotations

import dask


class Stats:
    """The plugin's counters (one instance, in the plugin's state)."""

    def __init__(self):
        self.written: dict = {}        # codec -> [frames, bytes]
        self.changes: dict = {}        # peer kind -> count
        self.recodes = 0
        self.recode_failures = 0
        self.relayed_recodes = 0
        self.relayed_recode_failures = 0
        self.peers: dict = {"published": 0, "plain": 0}
        self.collector = None

    def count_written(self, codec: str, nbytes: int) -> None:
        entry = self.written.get(codec)
        if entry is None:
            entry = self.written[codec] = [0, 0]
        entry[0] += 1
        entry[1] += nbytes

    def count_change(self, peer_kind: str) -> None:
        self.changes[peer_kind] = self.changes.get(peer_kind, 0) + 1

    def register(self, links) -> None:
        """Adds the collector to prometheus_client's registry, where that
        package is importable; `links()` yields the open connections' Links."""
        if self.collector is not None:
            return
        try:
            import prometheus_client
        except ImportError:
            return
        self.collector = _Collector(self, links)
        prometheus_client.REGISTRY.register(self.collector)

    def unregister(self) -> None:
        collector, self.collector = self.collector, None
        if collector is None:
            return
        import prometheus_client
        try:
            prometheus_client.REGISTRY.unregister(collector)
        except KeyError:
            pass


class _Collector:
    def __init__(self, stats: Stats, links):
        self.stats = stats
        self.links = links

    def _name(self, name: str) -> str:
        namespace = dask.config.get("distributed.dashboard.prometheus.namespace", default="dask")
        return "_".join(p for p in (namespace, "caps", name) if p)

    def describe(self):
        return []  # names depend on the config at scrape time: no check at registration

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        s = self.stats
        frames = CounterMetricFamily(self._name("written_frames"), "Frames the codec per link wrote, by codec",
                                     labels=["codec"])
        sent = CounterMetricFamily(self._name("written_bytes"), "Bytes the codec per link wrote (as sent), by codec",
                                   labels=["codec"])
        for codec, (n, b) in sorted(s.written.items()):
            frames.add_metric([codec], n)
            sent.add_metric([codec], b)
        yield frames
        yield sent

        choice = GaugeMetricFamily(self._name("link_choice"),
                                   "Open connections by peer kind and their codec per link", labels=["peer_kind", "codec"])
        counts: dict = {}
        for link in self.links():
            key = (link.peer_kind, link.chooser.current or "unknown")
            counts[key] = counts.get(key, 0) + 1
        for (kind, codec), n in sorted(counts.items()):
            choice.add_metric([kind, codec], n)
        yield choice

        changes = CounterMetricFamily(self._name("link_choice_changes"),
                                      "Changes of a connection's codec per link, by peer kind", labels=["peer_kind"])
        for kind, n in sorted(s.changes.items()):
            changes.add_metric([kind], n)
        yield changes

        yield CounterMetricFamily(self._name("recodes"), "Messages recoded for their recipient", value=s.recodes)
        yield CounterMetricFamily(self._name("recode_failures"), "Messages the core could not recode (sent unchanged)",
                                  value=s.recode_failures)
        yield CounterMetricFamily(self._name("relayed_recodes"),
                                  "Relayed frames recoded into the codec of the link they go on", value=s.relayed_recodes)
        yield CounterMetricFamily(self._name("relayed_recode_failures"),
                                  "Relayed frames the core could not decode (sent as they came)",
                                  value=s.relayed_recode_failures)
        peers = CounterMetricFamily(self._name("peers"), "Connections by what the peer published", labels=["kind"])
        for kind, n in sorted(s.peers.items()):
            peers.add_metric([kind], n)
        yield peers
