package localcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certValidity is how long generated certificates are valid. A control plane
// lives for a test run or a dev session; a day is ample.
const certValidity = 24 * time.Hour

// certificateAuthority signs the serving and client certificates of one
// control plane. It is generated fresh for each control plane.
type certificateAuthority struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
}

// keyPair is a certificate with its private key, both PEM-encoded.
type keyPair struct {
	CertPEM []byte
	KeyPEM  []byte
}

func newCertificateAuthority(commonName string) (*certificateAuthority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-signing the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the CA certificate: %w", err)
	}
	return &certificateAuthority{cert: cert, key: key, certPEM: pemBlock("CERTIFICATE", der)}, nil
}

// keyPEM returns the CA's private key, PEM-encoded (controller-manager signs
// CertificateSigningRequests with it).
func (ca *certificateAuthority) keyPEM() ([]byte, error) {
	return marshalKey(ca.key)
}

// issueServing returns a serving certificate for the given DNS names and IPs.
func (ca *certificateAuthority) issueServing(commonName string, dnsNames []string, ips []net.IP) (keyPair, error) {
	return ca.issue(pkix.Name{CommonName: commonName}, x509.ExtKeyUsageServerAuth, dnsNames, ips)
}

// issueClient returns a client certificate for user name with the given
// groups, which the API server reads from CN and O.
func (ca *certificateAuthority) issueClient(user string, groups []string) (keyPair, error) {
	return ca.issue(pkix.Name{CommonName: user, Organization: groups}, x509.ExtKeyUsageClientAuth, nil, nil)
}

func (ca *certificateAuthority) issue(subject pkix.Name, usage x509.ExtKeyUsage, dnsNames []string, ips []net.IP) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("generating a key for %q: %w", subject.CommonName, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return keyPair{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return keyPair{}, fmt.Errorf("signing the certificate of %q: %w", subject.CommonName, err)
	}
	keyPEM, err := marshalKey(key)
	if err != nil {
		return keyPair{}, err
	}
	return keyPair{CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: keyPEM}, nil
}

// write stores the pair as <dir>/<name>.crt and <dir>/<name>.key and returns
// both paths.
func (kp keyPair) write(dir, name string) (certPath, keyPath string, err error) {
	certPath = filepath.Join(dir, name+".crt")
	keyPath = filepath.Join(dir, name+".key")
	if err := os.WriteFile(certPath, kp.CertPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("writing %s: %w", certPath, err)
	}
	if err := os.WriteFile(keyPath, kp.KeyPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("writing %s: %w", keyPath, err)
	}
	return certPath, keyPath, nil
}

// newServiceAccountKey returns a PEM private key for signing service-account
// tokens and the PEM public key the API server verifies them with.
func newServiceAccountKey() (privPEM, pubPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the service-account signing key: %w", err)
	}
	privPEM, err = marshalKey(key)
	if err != nil {
		return nil, nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the service-account public key: %w", err)
	}
	return privPEM, pemBlock("PUBLIC KEY", pubDER), nil
}

func marshalKey(key crypto.Signer) ([]byte, error) {
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("encoding a private key: unsupported key type %T", key)
	}
	der, err := x509.MarshalECPrivateKey(ec)
	if err != nil {
		return nil, fmt.Errorf("encoding a private key: %w", err)
	}
	return pemBlock("EC PRIVATE KEY", der), nil
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}

func randomSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, fmt.Errorf("drawing a certificate serial number: %w", err)
	}
	return serial, nil
}
