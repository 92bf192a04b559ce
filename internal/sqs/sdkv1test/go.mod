module github.com/okiba/okiba/internal/sqs/sdkv1test

go 1.26.0

require github.com/aws/aws-sdk-go v1.47.5

require github.com/jmespath/go-jmespath v0.4.0 // indirect
