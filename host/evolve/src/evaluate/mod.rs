//! The evaluate stage: which training tasks a round evaluates. The runner
//! (`ecdysis_runner::eval`) runs the episodes and the training loop caches
//! them per component hash; this stage only decides the tasks, the whole
//! training split or a [`task_budget`] chosen from it.

pub mod task_budget;
