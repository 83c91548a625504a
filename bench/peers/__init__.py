"""cliffwatch against real peers (Vegeta, GuideLLM, AIPerf) on one loopback server, measured in one run."""
