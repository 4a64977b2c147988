"""The data plane: every inference operation (plan = proto -> validated
domain, run on the engine, domain -> proto), with one subpackage per request
kind (chat, completion, generate) and the conversion, sessions' continuation
and prefill helpers they share."""
