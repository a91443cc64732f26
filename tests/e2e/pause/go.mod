module stagehand.test/pause

go 1.25
