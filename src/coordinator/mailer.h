// Mail for notifications (ADR 0013): one message to one address through the
// operator's SMTP server, with libcurl. The connection must be encrypted:
// smtp:// URLs upgrade with STARTTLS and fail if the server does not offer
// it (never a clear-text fallback); smtps:// is TLS from the start. The
// server's certificate is checked (against `ca_file` if set, else the
// system's CAs); credentials, if any, go only over TLS.
//
// Thread-safe (each call has its own curl handle).
#pragma once

#include <string>

#include "common/clock.h"
#include "common/status.h"

namespace claw {

struct SmtpOptions {
  std::string url;   // "smtp://mail.example.org:587" or "smtps://...:465"; empty: no mail
  std::string from;  // the sender address, e.g. "compute@example.org"
  std::string user, password;  // empty: no AUTH
  std::string ca_file;         // PEM; empty: the system's CAs
  Duration timeout = std::chrono::seconds(20);
};

// `address` if it is a plain mailbox (local@domain, printable ASCII, no
// spaces, angle brackets, commas or line breaks, at most 254 characters);
// InvalidArgument naming what is wrong otherwise.
Status CheckMailAddress(const std::string& address);

// Sends a text/plain UTF-8 message. `message_id` (without brackets) is the
// same on every retry of one event, so that receivers can drop repeats.
// Unavailable for what a retry may cure (connection, timeout, 4xx replies),
// InvalidArgument for a refused message or recipient (5xx).
Status SendMail(const SmtpOptions& smtp, const std::string& to, const std::string& subject,
                const std::string& text, const std::string& message_id, Time date);

}  // namespace claw
