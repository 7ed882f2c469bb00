// The coordinator's TLS material: a private CA and a server certificate
// signed by it, made once by `claw coordinator init` (or on first start) in
// the data directory:
//
//   ca.pem      the CA certificate: copy it to agents and clients, which pin
//               it (--ca); nothing else is trusted
//   ca.key      the CA's key (0600), to sign a new server certificate
//   server.pem  the server certificate, for the names given at init
//               (always localhost and 127.0.0.1)
//   server.key  its key (0600)
//
// Keys are ECDSA P-256; certificates are valid for ten years.
#pragma once

#include <string>
#include <vector>

#include "common/log.h"
#include "common/status.h"

namespace claw {

struct TlsMaterial {
  std::string ca_pem;
  std::string server_cert_pem;
  std::string server_key_pem;
};

// Reads the material from `data_dir`, or makes it when absent and `create`
// is set. `names`: extra DNS names or IP addresses for the server
// certificate. NotFound when absent and not created.
Result<TlsMaterial> LoadOrCreateTls(const std::string& data_dir,
                                    const std::vector<std::string>& names, bool create,
                                    Logger log);

// Reads a PEM file (a CA to pin); InvalidArgument naming it when unreadable.
Result<std::string> ReadPemFile(const std::string& path);

}  // namespace claw
