// Loaded as "libcrypto.so" by the agent before civetweb starts TLS (see libssl_shim.cc): its
// SONAME is libcrypto.so and it needs libcrypto.so.3, where civetweb finds every function it
// looks up under that name. Nothing of its own but this marker.

extern "C" {
__attribute__((visibility("default"))) int stagehand_crypto_shim = 1;
}
