"""The run's Neuron compile cache: where it is (what the nodes may do there: trainrun.logic.cluster_config).

The Neuron compiler wrapper (neuron_cc_wrapper, run by `neuron_parallel_compile` and by
torch-neuronx during training) keeps every compiled graph (NEFF) in the persistent cache that
NEURON_COMPILE_CACHE_URL names; an `s3://` URL puts it in S3 ("Neuron Persistent Cache", AWS
Neuron documentation). The compile and train jobs get the same URL: the AWS Neuron documentation
of the neuron_parallel_compile CLI says "You need to specify the same cache URL for both the
precompilation command (using neuron_parallel_compile) and the actual script execution command
if you want the previously compiled and cached graphs to be used".

By default the cache is one prefix per stack and instance type, in the stack's config bucket:
`s3://<config bucket>/neuron-compile-cache/<instance type>/`. The config bucket is the one
bucket every stack has (the run files and trainrun's Neuron script are there already, and
nothing in it is public), so a second run of the same workload finds the graphs the first one
compiled without any setup; the instance type is in the prefix because a NEFF is compiled for
one target (trn1 and trn2 graphs differ). `workload.compile_cache` names another location
(`s3://...`, in a bucket the stack allows) or turns the cache off (`off`: no
NEURON_COMPILE_CACHE_URL at all, the Neuron default of a local directory on each node).

Pure: no AWS calls. See docs/run-file.md, "The Neuron compile cache".
"""

from __future__ import annotations

from trainrun.model.run_file import COMPILE_CACHE_OFF, RunSpec

__all__ = ["CACHE_ENV_NAME", "CACHE_PREFIX", "cache_url"]

CACHE_ENV_NAME = "NEURON_COMPILE_CACHE_URL"
# The stack's caches, one per instance type below it, in the config bucket.
CACHE_PREFIX = "neuron-compile-cache"


def cache_url(spec: RunSpec, config_bucket: str) -> str | None:
    """The NEURON_COMPILE_CACHE_URL of the run's jobs (always ending in `/`), or None when the run
    turns the cache off."""
    chosen = spec.workload.compile_cache
    if chosen == COMPILE_CACHE_OFF:
        return None
    if chosen is not None:
        return chosen if chosen.endswith("/") else chosen + "/"
    if not config_bucket:
        raise ValueError("the default compile cache is in the stack's config bucket (CONFIG_BUCKET), which is not set")
    return f"s3://{config_bucket}/{CACHE_PREFIX}/{spec.capacity.instance_type}/"
