// Loaded as "libssl.so" by the agent before civetweb starts TLS (metrics_tls.h): Debian 12's
// civetweb 1.15 loads OpenSSL at run time, by the names libssl.so and libcrypto.so, and looks
// up the OpenSSL 1.1 function SSL_get_peer_certificate, which OpenSSL 3 no longer exports (a
// macro for SSL_get1_peer_certificate now); its missing entry is called on every TLS
// connection. This library's SONAME is libssl.so, so civetweb's dlopen finds it already
// loaded; it needs libssl.so.3, where every other function civetweb looks up is found, and adds
// the one that is missing, with the same meaning (a reference the caller frees).

extern "C" {
// NOLINTBEGIN(readability-identifier-naming): OpenSSL's names.
void* SSL_get1_peer_certificate(const void* ssl);

__attribute__((visibility("default"))) void* SSL_get_peer_certificate(const void* ssl) {
  return SSL_get1_peer_certificate(ssl);
}

// NOLINTEND(readability-identifier-naming)
}
