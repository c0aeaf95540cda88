//! Integration tests of evolution (one test binary): the FDCR discussion,
//! the coders and training's LLM-facing paths against the mock server.

mod evolve_llm;
