//! End-to-end tests of the `ecdysis-host` binary and the library through it
//! (one test binary; each module is one area).

mod bench_race;
mod cli;
mod concurrency;
mod contain;
mod containment;
mod crate_order;
mod docs;
mod docs_book;
mod docs_commands;
mod docs_examples;
mod docs_serve_example;
mod evolve;
mod failures;
mod isolate;
mod layers;
mod local_llm;
mod mlflow;
mod proxy;
mod python;
mod report;
mod run;
mod runtimes;
mod serve;
mod store;
mod support;
mod template_fuel;
mod train_llm;
mod train_protocol;
