"""tests/e2e/certs.py - X.509 certificates for the TLS tests, made with the
openssl command line (Debian's openssl) in a test's temp dir: a CA, server
certificates for 127.0.0.1/localhost, client certificates with a CN and
SANs, and expired ones (signed under libfaketime, which the tests install
anyway). Keys are EC P-256: fast to make, accepted by every TLS stack here.
"""

import os
import subprocess

OPENSSL = "openssl"


def _run(args, env=None):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE, timeout=30, env=env)


def _key(path):
    _run([OPENSSL, "genpkey", "-algorithm", "EC", "-pkeyopt",
          "ec_paramgen_curve:P-256", "-out", path])
    os.chmod(path, 0o600)


class Ca:
    """A self-signed CA in dir: .cert and .key are PEM file paths."""

    def __init__(self, dir, name="lockd test CA"):
        os.makedirs(dir, exist_ok=True)
        self.dir = dir
        safe = name.replace(" ", "_")
        self.key = os.path.join(dir, safe + ".key")
        self.cert = os.path.join(dir, safe + ".pem")
        _key(self.key)
        _run([OPENSSL, "req", "-x509", "-new", "-key", self.key, "-days",
              "30", "-subj", "/CN=" + name, "-addext",
              "basicConstraints=critical,CA:TRUE", "-addext",
              "keyUsage=critical,keyCertSign,cRLSign", "-out", self.cert])
        self._serial = 1

    def issue(self, cn, sans=(), client=False, days=7, at=None, name=None):
        """A certificate for cn signed by this CA: (cert_path, key_path).
        sans: "DNS:x", "IP:127.0.0.1", "URI:spiffe://..." entries.
        client: for client auth (else server auth). at: a date string
        ("2020-01-01") to sign it at under libfaketime, so that with a small
        days it is long expired."""
        base = os.path.join(self.dir, name or cn.replace("/", "_"))
        key, csr, cert = base + ".key", base + ".csr", base + ".pem"
        ext = base + ".ext"
        _key(key)
        _run([OPENSSL, "req", "-new", "-key", key, "-subj", "/CN=" + cn,
              "-out", csr])
        lines = ["basicConstraints=critical,CA:FALSE",
                 "keyUsage=critical,digitalSignature,keyEncipherment",
                 "extendedKeyUsage=" + ("clientAuth" if client
                                        else "serverAuth")]
        if sans:
            lines.append("subjectAltName=" + ",".join(sans))
        with open(ext, "w") as f:
            f.write("\n".join(lines) + "\n")
        self._serial += 1
        args = [OPENSSL, "x509", "-req", "-in", csr, "-CA", self.cert,
                "-CAkey", self.key, "-set_serial", str(self._serial),
                "-days", str(days), "-extfile", ext, "-out", cert]
        if at is not None:
            args = ["faketime", at] + args
        _run(args)
        return cert, key

    def server(self, name="server"):
        """A server certificate for 127.0.0.1, ::1 and localhost."""
        return self.issue("localhost", ("DNS:localhost", "IP:127.0.0.1",
                                        "IP:::1"), name=name)
