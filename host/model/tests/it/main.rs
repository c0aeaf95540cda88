//! Integration tests of the model layer (one test binary): the HTTP
//! client against the mock server, and the LLM user over it.

mod llm_user;
mod model_client;
