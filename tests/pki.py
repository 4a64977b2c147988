"""Certificates made at test time for mTLS tests: a CA, and certificates
it signs for a server (localhost) and for clients (cryptography package)."""

from __future__ import annotations

import dataclasses
import datetime
import pathlib

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclasses.dataclass(frozen=True)
class Issued:
    """A certificate and its key, as files and as PEM bytes."""

    cert: str  # path
    key: str  # path
    cert_pem: bytes
    key_pem: bytes


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(folder: pathlib.Path, stem: str, cert: x509.Certificate,
           key: ec.EllipticCurvePrivateKey) -> Issued:
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    (folder / f"{stem}.pem").write_bytes(cert_pem)
    (folder / f"{stem}-key.pem").write_bytes(key_pem)
    return Issued(str(folder / f"{stem}.pem"), str(folder / f"{stem}-key.pem"), cert_pem, key_pem)


class CA:
    """A self-signed certificate authority that issues leaf certificates."""

    def __init__(self, folder: pathlib.Path, name: str = "test-ca") -> None:
        self.folder, self.name = folder, name
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
            .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.me = _write(folder, name, self._cert, self._key)

    @property
    def pem(self) -> bytes:
        return self.me.cert_pem

    def issue(self, cn: str, *, server: bool = False) -> Issued:
        """A leaf for `cn`: a server certificate (for localhost) or a client's."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(self._cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        return _write(self.folder, f"{self.name}-{cn}", builder.sign(self._key, hashes.SHA256()),
                      key)
